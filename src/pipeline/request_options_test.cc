#include "pipeline/request_options.h"

#include <gtest/gtest.h>

#include <set>

namespace trainfit {
namespace {

// Sets one option from command-line text, as the command line does.
Status set_text(RequestDraft& draft, std::string_view key, const std::vector<std::string>& texts,
                RequestCommand command = RequestCommand::kEstimate) {
  const RequestOption* o = find_request_option(key);
  EXPECT_NE(o, nullptr) << key;
  if (o == nullptr) return invalid_argument("no such option");
  const std::string flag = option_flag(*o);
  TF_ASSIGN_OR_RETURN(const OptionValue value, option_value_from_text(*o, flag, texts));
  return set_request_option(draft, *o, command, value, flag);
}

TEST(RequestOptions, EveryRowHasOneFlagAKindItsHelpAndACommand) {
  std::set<std::string> flags;
  for (const RequestOption& o : request_options()) {
    EXPECT_TRUE(flags.insert(option_flag(o)).second) << o.key;
    EXPECT_FALSE(o.help.empty()) << o.key;
    EXPECT_EQ(o.help.find('\n'), std::string_view::npos) << o.key;
    EXPECT_NE(o.commands, 0) << o.key;
    EXPECT_NE(o.set, nullptr) << o.key;
    EXPECT_NE(o.words, nullptr) << o.key;
    EXPECT_EQ(o.kind == OptionKind::kEnum, o.choices != nullptr) << o.key;
    EXPECT_EQ(o.refused != 0, !o.refusal.empty()) << o.key;
    EXPECT_EQ(o.commands & o.refused, 0) << o.key;  // taken or refused, not both
    EXPECT_EQ(o.kind == OptionKind::kFile || o.kind == OptionKind::kTrace, !o.file_what.empty())
        << o.key;
  }
  EXPECT_EQ(option_flag("seq_len"), "--seq-len");
  EXPECT_EQ(option_flag("broadcast_buffers"), "--no-broadcast-buffers");  // on by default
}

// What a request's flags say, set again from their text, writes the same flags.
TEST(RequestOptions, RequestArgsSetAgainGiveTheSameArgs) {
  RequestDraft draft;
  ASSERT_TRUE(set_text(draft, "model", {"resnet50"}).ok());
  ASSERT_TRUE(set_text(draft, "batch", {"32"}).ok());
  ASSERT_TRUE(set_text(draft, "precision", {"amp-bf16"}).ok());
  ASSERT_TRUE(set_text(draft, "checkpoint", {"layer3", "layer4"}).ok());
  ASSERT_TRUE(set_text(draft, "gpus", {"2"}).ok());
  ASSERT_TRUE(set_text(draft, "bucket_cap_mb", {"10"}).ok());
  ASSERT_TRUE(set_text(draft, "gpu", {"rtx4090"}).ok());
  ASSERT_TRUE(set_text(draft, "margin", {"5%"}).ok());
  ASSERT_TRUE(set_text(draft, "max_split_size", {"128MiB"}).ok());
  Result<TrainingRequest> r = finish_request(std::move(draft));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<std::string> args = request_args(*r);
  EXPECT_EQ(args,
            (std::vector<std::string>{"--model",          "resnet50", "--batch",      "32",
                                      "--precision",      "amp-bf16", "--checkpoint", "layer3",
                                      "--checkpoint",     "layer4",   "--gpus",       "2",
                                      "--bucket-cap-mb",  "10",       "--gpu",        "rtx4090",
                                      "--max-split-size", "128MiB",   "--margin",     "5%"}));
  // Each option's words alone, and with `always` a default's too.
  EXPECT_EQ(option_words("precision", *r), (std::vector<std::string>{"--precision", "amp-bf16"}));
  EXPECT_TRUE(option_words("optimizer_impl", *r).empty());
  EXPECT_EQ(option_words("optimizer_impl", *r, /*always=*/true),
            (std::vector<std::string>{"--optimizer-impl", "default"}));
}

// LoRA from Python's dict (typed fields) and from --lora's text give one config.
TEST(RequestOptions, LoraFieldsFromADictEqualTheText) {
  const OptionFields typed = {{"r", int64_t{16}},
                              {"alpha", 32.0},
                              {"target", std::vector<std::string>{"q_proj", "v_proj"}},
                              {"double_quant", false},
                              {"quant", std::string("nf4")}};
  Result<LoraConfig> from_dict = lora_from_fields(typed);
  Result<LoraConfig> from_text = parse_lora(
      "r=16,alpha=32,target=q_proj,v_proj,double_quant=false,"
      "quant=nf4");
  ASSERT_TRUE(from_dict.ok()) << from_dict.status().to_string();
  ASSERT_TRUE(from_text.ok()) << from_text.status().to_string();
  EXPECT_EQ(lora_arg(*from_dict), lora_arg(*from_text));
  EXPECT_EQ(lora_arg(*from_dict),
            "r=16,alpha=32,target=q_proj,v_proj,quant=nf4,double_quant=false");
  // Types that mean nothing here are refused in one line.
  EXPECT_FALSE(lora_from_fields({{"r", 2.5}}).ok());
  EXPECT_FALSE(lora_from_fields({{"prepare", int64_t{3}}}).ok());
  EXPECT_FALSE(lora_from_fields({{"target", std::vector<std::string>{""}}}).ok());
  EXPECT_FALSE(lora_from_fields({{"rank", int64_t{8}}}).ok());
}

TEST(RequestOptions, BadTextIsOneLineNamingTheFlag) {
  RequestDraft draft;
  const Status batch = set_text(draft, "batch", {"eight"});
  EXPECT_EQ(batch.message(), "--batch 'eight' is not a whole number");
  const Status overflow = set_text(draft, "gpus", {"99999999999"});
  EXPECT_EQ(overflow.message(), "--gpus 99999999999 is too large");
  EXPECT_FALSE(set_text(draft, "batch", {"99999999999999999999"}).ok());  // past int64
  EXPECT_FALSE(set_text(draft, "set", {"=3"}).ok());
  EXPECT_FALSE(set_text(draft, "margin", {"60%"}).ok());
  EXPECT_FALSE(set_text(draft, "input", {"3xabc"}).ok());
  EXPECT_FALSE(set_text(draft, "lora", {"r=8,,"}).ok());
  const Status precision = set_text(draft, "precision", {"fp64"});
  EXPECT_EQ(precision.message(), "unknown --precision 'fp64'");
}

TEST(RequestOptions, ACommandRefusesWhatItDoesNotTakeAndSaysWhy) {
  RequestDraft draft;
  const Status batch = set_text(draft, "batch", {"8"}, RequestCommand::kLaunch);
  EXPECT_NE(batch.message().find("launch chooses the per-GPU batch"), std::string::npos);
  const Status gpu = set_text(draft, "gpu", {"rtx4090"}, RequestCommand::kSummary);
  EXPECT_EQ(gpu.message(), "--gpu does not apply to summary");
}

}  // namespace
}  // namespace trainfit
