// `--hf-config`: a Hugging Face config.json read as the zoo model and --set keys it names.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cli/cli_test_util.h"
#include "pipeline/request.h"
#include "pipeline/request_options.h"

namespace trainfit {
namespace {

const std::string kExamples = std::string(TRAINFIT_TEST_DATA_DIR) + "/../../examples/";

// The config file and the zoo model with its fields as --set keys are the same request.
TEST(HfConfigCli, ConfigFileEqualsTheModelWithItsFields) {
  const nlohmann::json from_file =
      run_json({"estimate", "--hf-config", kExamples + "llama-3.2-1b.json", "--seq-len", "512",
                "--precision", "bf16"});
  const nlohmann::json from_sets =
      run_json({"estimate", "--model", "llama", "--set", "hidden_size=2048", "--set",
                "intermediate_size=8192", "--set", "num_hidden_layers=16", "--set",
                "tie_word_embeddings=true", "--set", "max_position_embeddings=131072", "--seq-len",
                "512", "--precision", "bf16"});
  EXPECT_EQ(from_file.at("parameters"), 1'235'814'400);
  EXPECT_EQ(from_file.at("peak_allocated_bytes"), from_sets.at("peak_allocated_bytes"));
  EXPECT_EQ(from_file.at("peak_reserved_bytes"), from_sets.at("peak_reserved_bytes"));
}

// --set keys apply on top of the file's fields.
TEST(HfConfigCli, SetKeysOverrideTheFile) {
  const nlohmann::json two_layers =
      run_json({"estimate", "--hf-config", kExamples + "llama-3-8b.json", "--set",
                "num_hidden_layers=2", "--seq-len", "128"});
  EXPECT_EQ(two_layers.at("parameters"), 8'030'261'248 - int64_t{30} * 218'112'000);
}

TEST(HfConfigCli, BadFilesAndSourcesAreOneLineAndExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"estimate", "--hf-config", "/nonexistent/config.json"}, "/nonexistent/config.json"},
      {{"estimate", "--hf-config", kExamples + "llama-3-8b.json", "--model", "llama"},
       "--hf-config"},
      {{"estimate", "--hf-config", std::string(TRAINFIT_TEST_DATA_DIR) + "/../../README.md"},
       "README.md"},
      {{"fit", "--hf-config", kExamples + "mistral-7b-v0.1.json", "--seq-len", "8192", "--gpu",
        "h100-80gb"},
       "reaches sliding_window 4096"},
      // Phi-3 mini 4k's window of 2047 tokens: a longer sequence needs the windowed mask.
      {{"estimate", "--hf-config", kExamples + "phi-3-mini-4k-instruct.json", "--seq-len", "2048"},
       "reaches sliding_window 2047"},
      // peft has no default target modules for phi3.
      {{"estimate", "--hf-config", kExamples + "phi-3-mini-4k-instruct.json", "--lora", "r=16"},
       "--lora needs target= for phi3"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args[2]);
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

// peft's print_trainable_parameters for Llama 3 8B: r=16 on q_proj and v_proj (its default
// targets) adds 16 x (4096 + 4096) and 16 x (4096 + 1024) per layer; all-linear is the figure
// LoRA notebooks print, 41,943,040 of 8,072,204,288.
TEST(LoraCli, TrainableParametersAreTheAdapters) {
  const nlohmann::json qv = run_json({"estimate", "--hf-config", kExamples + "llama-3-8b.json",
                                      "--lora", "r=16", "--seq-len", "256", "--precision", "bf16"});
  EXPECT_EQ(qv.at("trainable_parameters"), 6'815'744);
  EXPECT_EQ(qv.at("parameters"), 8'030'261'248 + 6'815'744);
  EXPECT_EQ(qv.at("lora").at("target"), nlohmann::json({"q_proj", "v_proj"}));
  EXPECT_EQ(qv.at("lora").at("adapter_dtype"), "fp32");
  const nlohmann::json all =
      run_json({"estimate", "--hf-config", kExamples + "llama-3-8b.json", "--lora",
                "r=16,alpha=32,dropout=0.05,target=all-linear", "--seq-len", "256"});
  EXPECT_EQ(all.at("trainable_parameters"), 41'943'040);
  EXPECT_EQ(all.at("parameters"), 8'072'204'288);
}

// Phi-3 mini with r=16 on its four fused Linear kinds: 16 x (in + out) per Linear, 786,432 a
// layer.
TEST(LoraCli, Phi3AdaptsItsFusedProjections) {
  const nlohmann::json j =
      run_json({"estimate", "--hf-config", kExamples + "phi-3-mini-4k-instruct.json", "--lora",
                "r=16,target=qkv_proj,o_proj,gate_up_proj,down_proj", "--seq-len", "1024"});
  EXPECT_EQ(j.at("trainable_parameters"), 25'165'824);
  EXPECT_EQ(j.at("parameters"), 3'821'079'552 + 25'165'824);
  const nlohmann::json all =
      run_json({"estimate", "--hf-config", kExamples + "phi-3-mini-4k-instruct.json", "--lora",
                "r=16,target=all-linear", "--seq-len", "1024"});
  EXPECT_EQ(all.at("trainable_parameters"), 25'165'824);
}

// Mixtral 8x7B: peft's defaults (q_proj, v_proj) train what they train on Llama 3 8B; all-linear
// adds the router (16 x (4096 + 8)) and every expert's w1, w2 and w3 (16 x (4096 + 14336) each):
// 7,569,536 a layer.
TEST(LoraCli, MixtralAdaptsTheRouterAndEveryExpertUnderAllLinear) {
  const std::string config = kExamples + "mixtral-8x7b-v0.1.json";
  const nlohmann::json qv =
      run_json({"estimate", "--hf-config", config, "--lora", "r=16", "--seq-len", "512"});
  EXPECT_EQ(qv.at("trainable_parameters"), 6'815'744);
  const nlohmann::json all = run_json(
      {"estimate", "--hf-config", config, "--lora", "r=16,target=all-linear", "--seq-len", "512"});
  EXPECT_EQ(all.at("trainable_parameters"), 242'225'152);
  EXPECT_EQ(all.at("parameters"), 46'702'792'704 + 242'225'152);
}

// Only the adapters train, so no gradient or optimizer state is kept for the base: far less
// memory than full fine-tuning, and the header says what trains.
TEST(LoraCli, LoraKeepsNoStateForTheFrozenBase) {
  const std::vector<std::string> base{"estimate",  "--hf-config", kExamples + "llama-3.2-1b.json",
                                      "--seq-len", "512",         "--precision",
                                      "bf16"};
  std::vector<std::string> lora = base;
  lora.insert(lora.end(), {"--lora", "r=8,target=q_proj,k_proj,v_proj,o_proj"});
  const nlohmann::json full = run_json(base);
  const nlohmann::json adapted = run_json(lora);
  EXPECT_LT(adapted.at("peak_allocated_bytes").get<int64_t>(),
            full.at("peak_allocated_bytes").get<int64_t>() / 2);
  const CliRun text = run(lora);
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("llama (llama-3.2-1b.json), batch 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("LoRA r=8, alpha 8 on q_proj, k_proj, v_proj, o_proj: 1,703,936 of "
                          "1,237,518,336 parameters train"),
            std::string::npos)
      << text.out;
}

// fit --what-if offers a decoder's own knobs, and each row's command names the config file. (With
// as many key/value heads as query heads: SDPA in fp32 then runs the memory-efficient kernel,
// which takes no grouped-query attention.)
TEST(LoraCli, WhatIfOffersLoraTheCacheAndSdpa) {
  const nlohmann::json fit =
      run_json({"fit", "--hf-config", kExamples + "llama-3.2-1b.json", "--seq-len", "256", "--set",
                "attention=eager", "--set", "num_hidden_layers=2", "--set",
                "num_key_value_heads=32", "--gpu", "rtx4090", "--what-if"});
  std::map<std::string, nlohmann::json> rows;
  for (const nlohmann::json& row : fit.at("what_if").at("rows")) {
    rows[row.at("name").get<std::string>()] = row;
  }
  // The rows are at the largest batch that fits, whose peak the report gives: each of these
  // knobs lowers it.
  ASSERT_EQ(fit.at("what_if").at("batch"), fit.at("max_batch"));
  const auto as_given = fit.at("peak_allocated_bytes").get<int64_t>();
  for (const char* name : {"LoRA r=16 on q_proj, v_proj", "QLoRA r=16 on q_proj, v_proj",
                           "LoRA r=16 on all-linear", "SDPA attention", "no key/value cache"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(rows.contains(name));
    EXPECT_LT(rows[name].at("peak_allocated_bytes").get<int64_t>(), as_given);
    EXPECT_EQ(rows[name].at("estimate_args")[0], "--hf-config");
  }
  EXPECT_EQ(rows["LoRA r=16 on q_proj, v_proj"].at("args"),
            nlohmann::json({"--lora", "r=16,alpha=32,target=q_proj,v_proj"}));
  EXPECT_LT(rows["QLoRA r=16 on q_proj, v_proj"].at("peak_allocated_bytes").get<int64_t>(),
            rows["LoRA r=16 on q_proj, v_proj"].at("peak_allocated_bytes").get<int64_t>());
}

// FSDP in torch 1.13 cannot flatten frozen and trained parameters into one unit: with LoRA, fit
// does not offer it.
TEST(LoraCli, WhatIfLeavesFsdpOutUnderLora) {
  const nlohmann::json fit = run_json({"fit", "--hf-config", kExamples + "llama-3.2-1b.json",
                                       "--seq-len", "128", "--set", "num_hidden_layers=2", "--lora",
                                       "r=8", "--gpus", "2", "--gpu", "h100-80gb", "--what-if"});
  bool zero1 = false;
  bool four_bit = false;
  for (const nlohmann::json& row : fit.at("what_if").at("rows")) {
    EXPECT_NE(row.at("name"), "FSDP (full_shard)");
    zero1 = zero1 || row.at("name") == "ZeroRedundancyOptimizer";
    if (row.at("name") == "4-bit NF4 base (QLoRA)") {
      four_bit = true;
      EXPECT_EQ(row.at("args"), nlohmann::json({"--lora", "r=8,quant=nf4"}));
    }
  }
  EXPECT_TRUE(zero1);
  EXPECT_TRUE(four_bit);
  EXPECT_TRUE(fit.at("what_if").at("skipped").empty()) << fit.at("what_if").at("skipped");
}

// transformers turns the key/value cache off under gradient checkpointing, and so does
// --checkpoint on a decoder.
TEST(LoraCli, CheckpointTurnsTheCacheOff) {
  const std::vector<std::string> base{
      "estimate",     "--hf-config",   kExamples + "llama-3.2-1b.json", "--seq-len", "256",
      "--checkpoint", "model.layers.*"};
  std::vector<std::string> off = base;
  off.insert(off.end(), {"--set", "use_cache=false"});
  std::vector<std::string> on = base;
  on.insert(on.end(), {"--set", "use_cache=true"});
  EXPECT_EQ(run_json(base).at("peak_allocated_bytes"), run_json(off).at("peak_allocated_bytes"));
  EXPECT_EQ(run_json(on).at("peak_allocated_bytes"), run_json(off).at("peak_allocated_bytes"));
}

// --checkpoint-reentrant (use_reentrant=True): LoRA trains through it because the decoder's
// embeddings then require grad (enable_input_require_grads), it costs more than non-reentrant
// checkpointing, and it needs --checkpoint and an input that requires grad.
TEST(LoraCli, ReentrantCheckpointingMakesTheEmbeddingsRequireGrad) {
  const std::vector<std::string> base{
      "estimate",       "--hf-config",   kExamples + "llama-3.2-1b.json",
      "--seq-len",      "256",           "--checkpoint",
      "model.layers.*", "--lora",        "r=16",
      "--set",          "vocab_size=512"};
  std::vector<std::string> reentrant = base;
  reentrant.emplace_back("--checkpoint-reentrant");
  const nlohmann::json plain = run_json(base);
  const nlohmann::json re = run_json(reentrant);
  EXPECT_EQ(re.at("checkpoint_reentrant"), true);
  EXPECT_EQ(plain.at("checkpoint_reentrant"), false);
  EXPECT_EQ(re.at("trainable_parameters"), plain.at("trainable_parameters"));
  EXPECT_GT(re.at("peak_allocated_bytes").get<int64_t>(),
            plain.at("peak_allocated_bytes").get<int64_t>());

  const CliRun alone = run({"estimate", "--hf-config", kExamples + "llama-3.2-1b.json",
                            "--checkpoint-reentrant", "--seq-len", "64"});
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("--checkpoint-reentrant needs --checkpoint"), std::string::npos)
      << alone.err;
  // ResNet's layer1 takes the output of a frozen stem: PyTorch would give it no gradients.
  const CliRun frozen = run({"estimate", "--model", "resnet18", "--freeze", "conv1", "--freeze",
                             "bn1", "--checkpoint", "layer1", "--checkpoint-reentrant"});
  EXPECT_EQ(frozen.code, 2);
  EXPECT_NE(frozen.err.find("no input of 'layer1' requires grad"), std::string::npos) << frozen.err;
  EXPECT_EQ(std::count(frozen.err.begin(), frozen.err.end(), '\n'), 1) << frozen.err;
}

// `command` on Llama 3.2 1B at `tokens` tokens in `precision`, with these --set keys.
nlohmann::json llama_1b(std::string command, std::string tokens, std::string precision,
                        const std::vector<std::string>& sets) {
  std::vector<std::string> args{
      std::move(command),  "--hf-config",     kExamples + "llama-3.2-1b.json",
      "--seq-len",         std::move(tokens), "--precision",
      std::move(precision)};
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  return run_json(args);
}

// What Llama 3.2 1B keeps for backward at 512 tokens without the cache, with these --set keys.
int64_t llama_1b_kept(std::string_view precision, std::initializer_list<std::string> sets) {
  std::vector<std::string> with_sets{"use_cache=false"};
  with_sets.insert(with_sets.end(), sets.begin(), sets.end());
  return llama_1b("estimate", "512", std::string(precision), with_sets)
      .at("activation_bytes")
      .get<int64_t>();
}

// The notes of Llama 3.2 1B's estimate at 64 tokens in `precision`, with --set `sets`.
nlohmann::json llama_1b_notes(std::string precision, const std::vector<std::string>& sets) {
  return llama_1b("estimate", "64", std::move(precision), sets).at("notes");
}

// attention=flash_attention_2 keeps each layer's keys and values at their own eight heads, as SDPA
// does with enable_gqa; SDPA with them repeated to 32 (transformers before 4.54) keeps 2 x 16 x
// (32 - 8) x 64 x 2 bytes a token more. flash_attn keeps a 16-byte RNG state more in each of its
// 16 layers. It needs fp16 or bf16 and a CUDA profile.
TEST(LoraCli, FlashAttentionKeepsKeysAndValuesUnrepeated) {
  const int64_t flash = llama_1b_kept("bf16", {"attention=flash_attention_2"});
  EXPECT_EQ(llama_1b_kept("bf16", {"attention=sdpa"}) - flash, -int64_t{16} * 16);
  EXPECT_EQ(llama_1b_kept("bf16", {"attention=sdpa", "sdpa_enable_gqa=false"}) - flash,
            int64_t{512} * 2 * 16 * (32 - 8) * 64 * 2 - int64_t{16} * 16);
  std::vector<std::string> fp32{
      "estimate", "--hf-config", kExamples + "llama-3.2-1b.json", "--seq-len",
      "64",       "--set",       "attention=flash_attention_2"};
  const CliRun full = run(fp32);
  EXPECT_EQ(full.code, 2);
  EXPECT_NE(full.err.find("fp16 or bf16"), std::string::npos) << full.err;
  fp32.insert(fp32.end(), {"--precision", "bf16", "--device-profile", "cpu"});
  const CliRun cpu = run(fp32);
  EXPECT_EQ(cpu.code, 2);
  EXPECT_NE(cpu.err.find("CUDA GPUs only"), std::string::npos) << cpu.err;
}

// Current transformers passes SDPA k and v at their own heads (enable_gqa) when there is no mask.
// In bf16 the flash kernel takes them so; in fp32 neither fused kernel can (flash needs fp16 or
// bf16, the memory-efficient one takes no grouped-query attention), and PyTorch's math path keeps
// the (B, H, L, L) scores as eager attention does: Llama 3.2 1B keeps exactly eager's bytes.
TEST(SdpaCli, GroupedQueryAttentionTakesFlashInBf16AndTheMathPathInFp32) {
  const auto kept = llama_1b_kept;
  const int64_t repeated = int64_t{512} * 2 * 16 * (32 - 8) * 64 * 2;  // k and v, 16 layers
  EXPECT_EQ(kept("bf16", {"sdpa_enable_gqa=false"}) - kept("bf16", {}), repeated);
  // The contiguous copies of transformers before 4.56 were transient: SDPA kept them instead.
  EXPECT_EQ(kept("bf16", {"sdpa_enable_gqa=false", "sdpa_contiguous=true"}),
            kept("bf16", {"sdpa_enable_gqa=false"}));
  const int64_t eager = kept("fp32", {"attention=eager"});
  EXPECT_EQ(kept("fp32", {}), eager);
  // The estimate says so, once for the 16 layers; in bf16 it has nothing to say.
  const nlohmann::json fp32_notes = llama_1b_notes("fp32", {});
  ASSERT_EQ(fp32_notes.size(), 1U);
  EXPECT_NE(fp32_notes[0].get<std::string>().find("math path in 16 attention calls"),
            std::string::npos)
      << fp32_notes;
  EXPECT_TRUE(llama_1b_notes("bf16", {}).empty());
  // Repeated, fp32 SDPA runs the memory-efficient kernel, which keeps its fp32 (B, H, L)
  // logsumexp where eager keeps the fp32 probabilities.
  EXPECT_EQ(eager - kept("fp32", {"sdpa_enable_gqa=false"}),
            int64_t{16} * (int64_t{32} * 512 * 512 * 4 - int64_t{32} * 512 * 4));
}

// What the transformers release changes (--set transformers=): SDPA's call (k and v repeated
// before 4.54, q, k and v made contiguous before 4.56), 4.48's loss over a shifted copy of the
// logits, and from 5.0 the weights loaded in the config's dtype, which autocast then trains.
TEST(TransformersCli, ReleasesSetSdpasCallTheLossAndTheLoadedDtype) {
  const auto kept = llama_1b_kept;
  EXPECT_EQ(kept("bf16", {"transformers=4.53"}),
            kept("bf16", {"sdpa_enable_gqa=false", "sdpa_contiguous=true"}));
  EXPECT_EQ(kept("bf16", {"transformers=4.54"}), kept("bf16", {"sdpa_contiguous=true"}));
  EXPECT_EQ(kept("bf16", {"transformers=4.56"}), kept("bf16", {}));
  EXPECT_EQ(kept("bf16", {"transformers=4.53", "sdpa_enable_gqa=true"}),
            kept("bf16", {"sdpa_contiguous=true"}));
  // 4.48 keeps log_softmax's fp32 output for one token fewer (the last position's logits are
  // dropped instead of its label padded), and nll_loss's targets are a view of the input labels
  // (at batch 1 labels[..., 1:] is contiguous already), where later releases keep the padded
  // labels, 513 int64s, whose shifted view the targets are.
  EXPECT_EQ(kept("bf16", {"transformers=4.49"}) - kept("bf16", {"transformers=4.48"}),
            int64_t{128'256} * 4 + int64_t{513} * 8);
  // Llama 3.2 1B's config.json stores bfloat16: transformers 5 loads it so, and autocast has
  // nothing to lower; 4.x loads float32 master weights.
  const auto parameter_bytes = [](std::string precision, const std::vector<std::string>& sets) {
    return llama_1b("summary", "64", std::move(precision), sets)
        .at("parameter_bytes")
        .get<int64_t>();
  };
  constexpr int64_t kParams = 1'235'814'400;
  EXPECT_EQ(parameter_bytes("amp-bf16", {}), kParams * 2);
  EXPECT_EQ(parameter_bytes("amp-bf16", {"transformers=4.57"}), kParams * 4);
  EXPECT_EQ(parameter_bytes("amp-bf16", {"dtype=float32"}), kParams * 4);
  EXPECT_EQ(parameter_bytes("bf16", {"dtype=bfloat16"}), kParams * 2);
  EXPECT_EQ(kept("amp-bf16", {}), kept("bf16", {}));
  // The estimate says so under autocast, and not once the weights are fp32.
  const nlohmann::json bf16_notes = llama_1b_notes("amp-bf16", {});
  ASSERT_EQ(bf16_notes.size(), 1U);
  EXPECT_NE(bf16_notes[0].get<std::string>().find("the weights are bfloat16 under autocast"),
            std::string::npos)
      << bf16_notes;
  EXPECT_TRUE(llama_1b_notes("amp-bf16", {"dtype=float32"}).empty());
}

TEST(TransformersCli, BadReleasesAndDtypesAreOneLineAndExit2) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--set", "transformers=4.47"}, "older than the oldest release modelled, 4.48"},
      {{"--set", "transformers=five"}, "transformers=five is not a release number"},
      {{"--set", "transformers=5.1x"}, "transformers=5.1x is not a release number"},
      {{"--set", "dtype=bfloat16"}, "--precision fp32 trains them in float32"},
      {{"--set", "dtype=float64"}, "dtype"},
      {{"--precision", "amp-fp16", "--set", "torch_dtype=float16"},
       "GradScaler refuses to unscale fp16 gradients"},
      {{"--precision", "amp-fp16", "--set", "dtype=float16"}, "GradScaler refuses"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args{"estimate", "--hf-config", kExamples + "llama-3.2-1b.json",
                                  "--seq-len", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    SCOPED_TRACE(extra.back());
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

// Liger's fused linear cross-entropy on Llama 3.2 1B (tied embeddings, a 128,256-token
// vocabulary) with LoRA in bf16 at 512 tokens: instead of the fp32 log-softmax of the logits
// (with the shifted labels nll_loss keeps, and scalars), it keeps the hidden states' gradient
// in bf16. Under autocast it is refused.
TEST(LoraCli, LigerLossKeepsTheHiddenGradientInsteadOfTheLogits) {
  const std::vector<std::string> base{"estimate",  "--hf-config", kExamples + "llama-3.2-1b.json",
                                      "--seq-len", "512",         "--precision",
                                      "bf16",      "--lora",      "r=8"};
  std::vector<std::string> liger = base;
  liger.insert(liger.end(), {"--set", "loss=fused_linear_cross_entropy"});
  const nlohmann::json ce = run_json(base);
  const nlohmann::json fused = run_json(liger);
  const int64_t log_softmax = int64_t{512} * 128'256 * 4;
  const int64_t hidden_grad = int64_t{512} * 2048 * 2;
  const int64_t labels = int64_t{512} * 8;
  const int64_t saved =
      ce.at("activation_bytes").get<int64_t>() - fused.at("activation_bytes").get<int64_t>();
  EXPECT_GE(saved, log_softmax - hidden_grad + labels);
  EXPECT_LE(saved, log_softmax - hidden_grad + labels + 16);
  EXPECT_LT(fused.at("peak_allocated_bytes"), ce.at("peak_allocated_bytes"));
  std::vector<std::string> amp = liger;
  amp[6] = "amp-bf16";
  const CliRun refused = run(amp);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("without autocast"), std::string::npos) << refused.err;
}

// Gemma 3 1B under SDPA: its four-in-five windowed layers need a mask only once the sequence
// reaches the window (masking_utils lets is_causal do the rest). SDPA turns that bool mask into
// one in the model's dtype, which the memory-efficient kernel keeps for backward: 2 bytes a
// (query, key) pair on each of the 22 windowed layers, the 4 global ones keeping none.
TEST(Gemma3Cli, SdpaKeepsAMaskOnTheWindowedLayersOnceTheSequenceReachesTheWindow) {
  auto kept = [](const char* window) {
    return run_json({"estimate", "--hf-config", kExamples + "gemma-3-1b.json", "--seq-len", "1024",
                     "--precision", "bf16", "--lora", "r=8", "--set",
                     std::string("sliding_window=") + window})
        .at("activation_bytes")
        .get<int64_t>();
  };
  const int64_t shorter = kept("1025");
  EXPECT_EQ(kept("1024") - shorter, int64_t{22} * 1024 * 1024 * 2);
  EXPECT_EQ(kept("512"), kept("1024"));
}

// QLoRA's 4-bit base as bitsandbytes stores Llama 3 8B: every Linear but lm_head is a Linear4bit.
// Its 6,979,321,856 weights take 3,489,660,928 bytes (two per byte); the bf16 embedding and
// lm_head 1,050,673,152 each, the norms 532,480, the fp32 adapters 27,262,976. Beside them (as
// buffers) 109,051,904 uint8 absmax codes (one per 64 weights), the nested fp32 absmax (one per
// 256 codes: 1,703,936 bytes), the dynamic maps (224 x 1,024), offsets (224 x 4) and code books
// (224 x 64), and the rotary inv_freq (256).
TEST(QloraCli, TheBaseTakesFourBitsAWeight) {
  const nlohmann::json s =
      run_json({"summary", "--hf-config", kExamples + "llama-3-8b.json", "--lora", "r=16,quant=nf4",
                "--seq-len", "64", "--precision", "bf16"});
  EXPECT_EQ(s.at("parameters"), 8'030'261'248 + 6'815'744);
  EXPECT_EQ(s.at("trainable_parameters"), 6'815'744);
  EXPECT_EQ(s.at("parameter_bytes"),
            int64_t{3'489'660'928} + int64_t{2} * 1'050'673'152 + 532'480 + int64_t{6'815'744} * 4);
  EXPECT_EQ(s.at("buffer_bytes"),
            int64_t{109'051'904} + 1'703'936 + int64_t{224} * (1'024 + 4 + 64) + 256);
}

// The 4-bit base is far smaller than the bf16 one, and its dequantized weights are transient.
TEST(QloraCli, FourBitBaseLowersThePeakAndSaysSo) {
  const std::vector<std::string> base{"estimate",  "--hf-config", kExamples + "llama-3.2-1b.json",
                                      "--seq-len", "512",         "--precision",
                                      "bf16",      "--lora"};
  std::vector<std::string> lora = base;
  lora.emplace_back("r=8");
  std::vector<std::string> qlora = base;
  qlora.emplace_back("r=8,quant=nf4");
  const auto lora_peak = run_json(lora).at("peak_allocated_bytes").get<int64_t>();
  const nlohmann::json q = run_json(qlora);
  EXPECT_LT(q.at("peak_allocated_bytes").get<int64_t>(), lora_peak - 1'000'000'000);
  EXPECT_EQ(q.at("lora").at("quant"), "nf4");
  EXPECT_EQ(q.at("lora").at("double_quant"), true);
  const CliRun text = run(qlora);
  EXPECT_NE(text.out.find("LoRA r=8, alpha 8 on q_proj, v_proj, 4-bit NF4 base (double "
                          "quantization): 851,968 of 1,236,666,368 parameters train"),
            std::string::npos)
      << text.out;
}

// `command` on Llama 3 8B at 512 tokens in `precision`, with --lora `lora`.
std::vector<std::string> llama_8b_lora(std::string command, std::string precision,
                                       std::string lora) {
  return {std::move(command),   "--hf-config", kExamples + "llama-3-8b.json",
          "--seq-len",          "512",         "--precision",
          std::move(precision), "--lora",      std::move(lora)};
}

// Llama 3 8B's parameters with a 4-bit base and the rest fp32: the 4-bit weights, the fp32
// embedding and lm_head (2,101,346,304 bytes each) and norms, and the fp32 r=16 adapters.
constexpr int64_t kLlama8bFp32RestBytes =
    int64_t{3'489'660'928} + int64_t{2} * 2'101'346'304 + 1'064'960 + int64_t{6'815'744} * 4;

// prepare_model_for_kbit_training casts the embedding, lm_head and norms to fp32 (twice their
// bf16 bytes), so the hidden states between the 4-bit layers are fp32 and the peak rises. It
// needs a 4-bit base, and is refused over 4-bit layers with biases (Qwen2's q, k and v).
TEST(QloraCli, PrepareCastsTheRestToFp32) {
  const auto with = [](std::string command, std::string lora) {
    return llama_8b_lora(std::move(command), "bf16", std::move(lora));
  };
  const nlohmann::json s = run_json(with("summary", "r=16,quant=nf4,prepare=true"));
  EXPECT_EQ(s.at("parameter_bytes"), kLlama8bFp32RestBytes);
  const nlohmann::json prepared = run_json(with("estimate", "r=16,quant=nf4,prepare=true"));
  const nlohmann::json plain = run_json(with("estimate", "r=16,quant=nf4"));
  EXPECT_EQ(prepared.at("lora").at("prepare"), true);
  EXPECT_GT(prepared.at("peak_allocated_bytes").get<int64_t>(),
            plain.at("peak_allocated_bytes").get<int64_t>());
  for (const auto& [args, message] :
       {std::pair{with("estimate", "r=16,prepare=true"), std::string("needs quant=")},
        std::pair{std::vector<std::string>{"estimate", "--hf-config", kExamples + "qwen2.5-7b.json",
                                           "--lora", "r=16,quant=nf4,prepare=true"},
                  std::string("with biases")}}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

// Under autocast (the Trainer's bf16=True over a model loaded in fp32, with
// bnb_4bit_compute_dtype=bfloat16) the base's other parameters are fp32, as after
// prepare_model_for_kbit_training: the same bytes. The 4-bit layers compute in bf16, far below
// LoRA's fp32 base under autocast. Biases beside the 4-bit weights are refused, as under prepare.
TEST(QloraCli, AutocastComputesInBf16OverAnFp32Rest) {
  // The model loaded in fp32 (transformers 5 would load the config's bf16).
  const auto fp32_load = [](std::string command, std::string lora) {
    std::vector<std::string> args = llama_8b_lora(std::move(command), "amp-bf16", std::move(lora));
    args.insert(args.end(), {"--set", "dtype=float32"});
    return run_json(args);
  };
  EXPECT_EQ(fp32_load("summary", "r=16,quant=nf4").at("parameter_bytes"), kLlama8bFp32RestBytes);
  const nlohmann::json q = fp32_load("estimate", "r=16,quant=nf4");
  const nlohmann::json lora = fp32_load("estimate", "r=16");
  EXPECT_EQ(q.at("precision"), "amp-bf16");
  EXPECT_LT(q.at("peak_allocated_bytes").get<int64_t>(),
            lora.at("peak_allocated_bytes").get<int64_t>() - int64_t{20} * 1'000'000'000);
  const CliRun r = run({"estimate", "--hf-config", kExamples + "qwen2.5-7b.json", "--precision",
                        "amp-bf16", "--lora", "r=16,quant=nf4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("autocast over 4-bit layers with biases"), std::string::npos) << r.err;
}

// What the 4-bit base is not modelled under is refused in one line.
TEST(QloraCli, ShardedParametersAreRefused) {
  const std::string config = kExamples + "llama-3.2-1b.json";
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--gpus", "2", "--strategy", "fsdp"},
        std::vector<std::string>{"--gpus", "2", "--strategy", "zero3"}}) {
    std::vector<std::string> args{"estimate", "--hf-config", config,         "--seq-len",
                                  "64",       "--lora",      "r=8,quant=nf4"};
    args.insert(args.end(), extra.begin(), extra.end());
    SCOPED_TRACE(extra[1]);
    const CliRun r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--lora quant="), std::string::npos) << r.err;
  }
}

// bitsandbytes' paged optimizers keep the states of parameters with 1e5 elements or more in
// unified memory, outside the allocator: two uint8 bytes per weight for PagedAdamW8bit. Llama
// 3.2 1B cut to two layers has 384,303,104 such weights: the tied embedding (262,668,288) and
// per layer q and o (4,194,304 each), k and v (1,048,576 each), gate, up and down (16,777,216
// each); its norms stay below.
TEST(PagedOptimizerCli, LargeStatesLeaveTheAllocator) {
  const std::vector<std::string> base{"estimate",
                                      "--hf-config",
                                      kExamples + "llama-3.2-1b.json",
                                      "--set",
                                      "num_hidden_layers=2",
                                      "--seq-len",
                                      "64",
                                      "--precision",
                                      "bf16",
                                      "--gpu",
                                      "rtx4090",
                                      "--optimizer"};
  std::vector<std::string> eight = base;
  eight.emplace_back("adamw8bit");
  std::vector<std::string> paged = base;
  paged.emplace_back("paged_adamw8bit");
  const nlohmann::json e = run_json(eight);
  const nlohmann::json p = run_json(paged);
  EXPECT_FALSE(e.contains("paged_optimizer_state_bytes"));
  EXPECT_EQ(p.at("paged_optimizer_state_bytes"), int64_t{2} * 384'303'104);
  EXPECT_LT(p.at("peak_allocated_bytes").get<int64_t>(),
            e.at("peak_allocated_bytes").get<int64_t>() - int64_t{2} * 384'000'000);
  const CliRun text = run(paged);
  EXPECT_NE(text.out.find("paged state            733 MiB  optimizer state in unified memory"),
            std::string::npos)
      << text.out;
}

TEST(LoraCli, BadLoraIsOneLineAndExit2) {
  const std::string config = kExamples + "llama-3.2-1b.json";
  const std::vector<std::string> values{
      "r=0",          "r=1.5",           "r=abc",        "dropout=1",  "alpha=nan",
      "x=1",          "q_proj",          "target=",      "target=foo", "adapter_dtype=fp8",
      "r=16,target=", "r=99999999999",   "r=16,,target", "=3",         "quant=int8",
      "quant=",       "double_quant=yes"};
  for (const std::string& v : values) {
    SCOPED_TRACE(v);
    const CliRun r = run({"estimate", "--hf-config", config, "--lora", v, "--seq-len", "64"});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const CliRun resnet = run({"estimate", "--model", "resnet18", "--lora", "r=4"});
  EXPECT_EQ(resnet.code, 2);
  EXPECT_NE(resnet.err.find("--lora needs target="), std::string::npos) << resnet.err;
}

// parse_lora reads back what lora_arg writes, and every cut of a valid value is a value or an
// error, never a crash.
TEST(LoraCli, ParseLoraReadsBackItsArgumentAndSurvivesCuts) {
  const std::string text = "r=16,alpha=32,dropout=0.05,target=q_proj,v_proj,adapter_dtype=base";
  const Result<LoraConfig> lora = parse_lora(text);
  ASSERT_TRUE(lora.ok()) << lora.status().to_string();
  EXPECT_EQ(lora->rank, 16);
  EXPECT_EQ(lora->alpha, 32);
  EXPECT_EQ(lora->dropout, 0.05);
  EXPECT_EQ(lora->target, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(lora->fp32_adapters);
  EXPECT_EQ(lora_arg(*lora), text);
  const Result<LoraConfig> again = parse_lora(lora_arg(*lora));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lora);
  for (size_t n = 0; n <= text.size(); ++n) {
    const Result<LoraConfig> cut = parse_lora(text.substr(0, n));
    if (!cut.ok()) {
      EXPECT_FALSE(cut.status().message().empty());
    }
  }
  const std::string quantized = "r=8,target=all-linear,quant=fp4,double_quant=false,prepare=true";
  const Result<LoraConfig> q = parse_lora(quantized);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->quant, LoraConfig::Quant::kFp4);
  EXPECT_FALSE(q->double_quant);
  EXPECT_TRUE(q->prepare);
  EXPECT_FALSE(parse_lora("r=8,prepare=yes").ok());
  EXPECT_EQ(lora_arg(*q), quantized);
  for (const char* garbage : {",,,", "=,=", "target=,", "r=1e400", "\xff\xfe", "r==2"}) {
    const Result<LoraConfig> g = parse_lora(garbage);
    EXPECT_FALSE(g.ok()) << garbage;
  }
}

}  // namespace
}  // namespace trainfit
