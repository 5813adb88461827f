"""The Python binding: trainfit.estimate, fit, compare and summary give, in process, the same
report as the command line's --json; a trace is loaded once into a handle; bad values raise
trainfit.Error with the library's one-line message, unknown keywords a TypeError; a trace file
rewritten is read anew; several threads run at once.

    TRAINFIT_BUILD=build/release /usr/bin/python3 tests/python/binding_test.py --trainfit build/release/trainfit
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import trainfit  # noqa: E402

TRAINFIT = None  # the command-line binary, from --trainfit
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def cli_json(*args):
    done = subprocess.run([TRAINFIT, *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def tiny_trace(width, path=None):
    """A small convolutional net traced at batch 1 and 2 (dict; also written to `path`)."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(width, 10))
    return trainfit.trace(model, lambda n: (torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))),
                          torch.nn.functional.cross_entropy, lambda p: torch.optim.AdamW(p),
                          out=path, name=f"tiny{width}")


class SameReport(unittest.TestCase):
    def test_estimate_zoo(self):
        cases = [
            (dict(model="resnet50", batch=64, gpu="rtx4090"),
             ["--model", "resnet50", "--batch", "64", "--gpu", "rtx4090"]),
            (dict(model="vit_b_16", batch=32, precision="amp-bf16", optimizer="adamw",
                  optimizer_impl="fused", gpu="a100-80gb"),
             ["--model", "vit_b_16", "--batch", "32", "--precision", "amp-bf16", "--optimizer",
              "adamw", "--optimizer-impl", "fused", "--gpu", "a100-80gb"]),
            (dict(model="resnet50", batch=8, input=(3, 160, 160), checkpoint=["layer3", "layer4"],
                  expandable_segments=True, explain=True, freeze=None),
             ["--model", "resnet50", "--batch", "8", "--input", "3x160x160", "--checkpoint",
              "layer3", "--checkpoint", "layer4", "--expandable-segments", "--explain"]),
            (dict(model="resnet50", batch=32, precision="amp-fp16", memory_format="channels_last",
                  tf32=True, dataset_size=50000, gpu="a100-80gb"),
             ["--model", "resnet50", "--batch", "32", "--precision", "amp-fp16",
              "--memory-format", "channels_last", "--tf32", "--dataset-size", "50000", "--gpu",
              "a100-80gb"]),
            (dict(model="resnet50", batch=64, optimizer="momentum", cudnn_benchmark=True,
                  loop="scoped", gpu="h100-80gb"),
             ["--model", "resnet50", "--batch", "64", "--optimizer", "momentum",
              "--cudnn-benchmark", "--loop", "scoped", "--gpu", "h100-80gb"]),
            (dict(model="act", batch=8, default_device="cuda", gpu="h100-80gb"),
             ["--model", "act", "--batch", "8", "--default-device", "cuda", "--gpu", "h100-80gb"]),
            (dict(model="resnet50", batch=32, precision="amp-fp16", grad_scaler_skips=2,
                  gpu="h100-80gb"),
             ["--model", "resnet50", "--batch", "32", "--precision", "amp-fp16",
              "--grad-scaler-skips", "2", "--gpu", "h100-80gb"]),
            (dict(hf_config=os.path.join(EXAMPLES, "llama-3.2-1b.json"), seq_len=256,
                  precision="bf16", set={"num_hidden_layers": 2},
                  lora={"r": 8, "dropout": 0.05, "target": ["q_proj", "v_proj"]}),
             ["--hf-config", os.path.join(EXAMPLES, "llama-3.2-1b.json"), "--seq-len", "256",
              "--precision", "bf16", "--set", "num_hidden_layers=2", "--lora",
              "r=8,dropout=0.05,target=q_proj,v_proj"]),
            (dict(hf_config=os.path.join(EXAMPLES, "llama-3.2-1b.json"), seq_len=128,
                  precision="bf16", set={"num_hidden_layers": 2},
                  lora={"r": 16, "target": "all-linear", "quant": "nf4", "double_quant": False}),
             ["--hf-config", os.path.join(EXAMPLES, "llama-3.2-1b.json"), "--seq-len", "128",
              "--precision", "bf16", "--set", "num_hidden_layers=2", "--lora",
              "r=16,target=all-linear,quant=nf4,double_quant=false"]),
            (dict(hf_config=os.path.join(EXAMPLES, "llama-3.2-1b.json"), seq_len=128,
                  precision="amp-bf16", set={"num_hidden_layers": 2},
                  lora={"r": 8, "quant": "nf4", "prepare": True}),
             ["--hf-config", os.path.join(EXAMPLES, "llama-3.2-1b.json"), "--seq-len", "128",
              "--precision", "amp-bf16", "--set", "num_hidden_layers=2", "--lora",
              "r=8,quant=nf4,prepare=true"]),
            (dict(hf_config=os.path.join(EXAMPLES, "llama-3.2-1b.json"), seq_len=128,
                  precision="bf16", set={"num_hidden_layers": 2}, lora="r=8",
                  checkpoint="model.layers.*", checkpoint_reentrant=True),
             ["--hf-config", os.path.join(EXAMPLES, "llama-3.2-1b.json"), "--seq-len", "128",
              "--precision", "bf16", "--set", "num_hidden_layers=2", "--lora", "r=8",
              "--checkpoint", "model.layers.*", "--checkpoint-reentrant"]),
            (dict(model="resnet18", batch=4, set={"num_classes": 10}, device_profile="cpu",
                  optimizer="sgd"),
             ["--model", "resnet18", "--batch", "4", "--set", "num_classes=10",
              "--device-profile", "cpu", "--optimizer", "sgd"]),
            (dict(model="resnet18", batch=8, gpus=2, strategy="ddp", bucket_cap_mb=10,
                  gradient_as_bucket_view=True, find_unused_parameters=True,
                  broadcast_buffers=False, gpu="rtx4090"),
             ["--model", "resnet18", "--batch", "8", "--gpus", "2", "--strategy", "ddp",
              "--bucket-cap-mb", "10", "--gradient-as-bucket-view", "--find-unused-parameters",
              "--no-broadcast-buffers", "--gpu", "rtx4090"]),
            (dict(model="resnet18", batch=4, gpus=4, strategy="zero1", optimizer="momentum",
                  baseline_batch=256, baseline_lr=0.1, dataset_size=1001, gpu="rtx4090"),
             ["--model", "resnet18", "--batch", "4", "--gpus", "4", "--strategy", "zero1",
              "--optimizer", "momentum", "--baseline-batch", "256", "--baseline-lr", "0.1",
              "--dataset-size", "1001", "--gpu", "rtx4090"]),
            (dict(model="vit_b_16", batch=8, gpus=4, strategy="fsdp",
                  fsdp_wrap="encoder.layers.*", fsdp_sharding="shard_grad_op",
                  gpu="a100-80gb"),
             ["--model", "vit_b_16", "--batch", "8", "--gpus", "4", "--strategy", "fsdp",
              "--fsdp-wrap", "encoder.layers.*", "--fsdp-sharding", "shard_grad_op",
              "--gpu", "a100-80gb"]),
            (dict(model="gpt2", batch=4, gpus=2, strategy="fsdp", fsdp_wrap="transformer.h.*",
                  fsdp_mixed_precision="bf16", gpu="h100-80gb"),
             ["--model", "gpt2", "--batch", "4", "--gpus", "2", "--strategy", "fsdp",
              "--fsdp-wrap", "transformer.h.*", "--fsdp-mixed-precision", "bf16", "--gpu",
              "h100-80gb"]),
            (dict(model="resnet18", batch=16, gpus=2, link="nvlink3", gpu="rtx3090"),
             ["--model", "resnet18", "--batch", "16", "--gpus", "2", "--link", "nvlink3",
              "--gpu", "rtx3090"]),
            (dict(model="resnet18", batch=16, gpus=4, nodes=2, network=200, gpu="a100-80gb"),
             ["--model", "resnet18", "--batch", "16", "--gpus", "4", "--nodes", "2",
              "--network", "200", "--gpu", "a100-80gb"]),
            (dict(model="resnet18", batch=16, gpus=4, bus_bandwidth=9.5, gpu="rtx4090"),
             ["--model", "resnet18", "--batch", "16", "--gpus", "4", "--bus-bandwidth", "9.5",
              "--gpu", "rtx4090"]),
        ]
        for kwargs, args in cases:
            with self.subTest(args=" ".join(args)):
                kwargs = dict(kwargs)
                got = trainfit.estimate(kwargs.pop("model", None), **kwargs)
                self.assertEqual(got, cli_json("estimate", *args))
                self.assertGreater(got["peak_allocated_bytes"], 0)
                if "link" in kwargs or "bus_bandwidth" in kwargs:
                    self.assertEqual(got["comm_time"]["link"], kwargs.get("link", "pcie4"))
                    self.assertEqual(got["comm_time"]["bus_gbps"],
                                     kwargs.get("bus_bandwidth", 200.0))

    def test_launch(self):
        got = trainfit.launch("resnet18", gpu="rtx4090", gpus=2, baseline_batch=512,
                              baseline_lr=0.1, optimizer="momentum", cores=16)
        self.assertEqual(got, cli_json("launch", "--model", "resnet18", "--gpu", "rtx4090",
                                       "--gpus", "2", "--baseline-batch", "512",
                                       "--baseline-lr", "0.1", "--optimizer", "momentum",
                                       "--cores", "16"))
        self.assertEqual(got["per_gpu_batch"] * got["gpus"] * got["grad_accum"], 512)

    def test_fit(self):
        got = trainfit.fit("resnet18", gpu="rtx4090")
        self.assertEqual(got, cli_json("fit", "--model", "resnet18", "--gpu", "rtx4090"))
        self.assertGreater(got["max_batch"], 1)

    def test_trace_dict_file_and_handle(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "tiny.trace.json")
            trace = tiny_trace(8, path)
            from_dict = trainfit.estimate(trace=trace, batch=16, device_profile="cpu")
            from_file = trainfit.estimate(trace=path, batch=16, device_profile="cpu")
            handle = trainfit.load_trace(path)
            self.assertEqual(handle.model, "tiny8")
            self.assertEqual(handle.batches, [2, 3])  # trainfit.trace's default batch sizes
            from_handle = trainfit.estimate(trace=handle, batch=16, device_profile="cpu")
            self.assertEqual(from_dict, from_file)
            self.assertEqual(from_handle, from_file)
            self.assertEqual(from_file, cli_json("estimate", "--trace", path, "--batch", "16",
                                                 "--device-profile", "cpu"))
            self.assertEqual(trainfit.fit(trace=handle, gpu="rtx4090", what_if=True),
                             cli_json("fit", "--trace", path, "--gpu", "rtx4090", "--what-if"))
            # The same path rewritten with a wider model: loading it again reads the new file,
            # while the handle keeps the trace it was made from.
            tiny_trace(32, path)
            wider = trainfit.estimate(trace=path, batch=16, device_profile="cpu")
            self.assertGreater(wider["peak_allocated_bytes"], from_file["peak_allocated_bytes"])
            self.assertEqual(wider, cli_json("estimate", "--trace", path, "--batch", "16",
                                             "--device-profile", "cpu"))
            self.assertEqual(trainfit.estimate(trace=handle, batch=16, device_profile="cpu"),
                             from_file)

    def test_gpu_profile(self):
        from trainfit import calibrate
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cpu.json")
            with open(path, "w") as f:
                json.dump(calibrate.measure("cpu", quick=True), f)
            self.assertEqual(trainfit.estimate("resnet18", batch=8, gpu_profile=path),
                             cli_json("estimate", "--model", "resnet18", "--batch", "8",
                                      "--gpu-profile", path))

    def test_fit_plans(self):
        self.assertEqual(trainfit.fit("resnet50", gpu="rtx4090", target_batch=384),
                         cli_json("fit", "--model", "resnet50", "--gpu", "rtx4090",
                                  "--target-batch", "384"))
        self.assertEqual(trainfit.fit("gpt2", seq_len=256, gpu="rtx4090", batch=4, what_if=True,
                                      rank="time"),
                         cli_json("fit", "--model", "gpt2", "--seq-len", "256", "--gpu",
                                  "rtx4090", "--batch", "4", "--what-if", "--rank", "time"))
        self.assertEqual(trainfit.fit("resnet18", gpu="all", margin="10%"),
                         cli_json("fit", "--model", "resnet18", "--gpu", "all", "--margin",
                                  "10%"))

    def test_compare_and_summary(self):
        got = trainfit.compare([dict(model="act", batch=4, set={"cameras": "320x240"}),
                                dict(model="diffusion", batch=8)], gpu="rtx4090")
        self.assertEqual(got, cli_json("compare", "--gpu", "rtx4090", "--model", "act", "--batch",
                                       "4", "--set", "cameras=320x240", "--model", "diffusion",
                                       "--batch", "8"))
        self.assertEqual(trainfit.summary("vit_b_16", batch=2, depth=2),
                         cli_json("summary", "--model", "vit_b_16", "--batch", "2", "--depth",
                                  "2"))

    def test_timeline(self):
        with tempfile.TemporaryDirectory() as scratch:
            ours = os.path.join(scratch, "ours.csv")
            theirs = os.path.join(scratch, "theirs.csv")
            trainfit.estimate("resnet18", batch=2, timeline=ours)
            cli_json("estimate", "--model", "resnet18", "--batch", "2", "--timeline", theirs)
            with open(ours) as a, open(theirs) as b:
                self.assertEqual(a.read(), b.read())

    def test_threads(self):
        want = cli_json("estimate", "--model", "resnet18", "--batch", "32", "--gpu", "rtx4090")
        results = [None] * 4

        def work(i):
            results[i] = trainfit.estimate("resnet18", batch=32, gpu="rtx4090")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [want] * len(results))


class Errors(unittest.TestCase):
    def assert_refused(self, call, *fragments):
        with self.assertRaises(trainfit.Error) as caught:
            call()
        message = str(caught.exception)
        self.assertEqual(len(message.splitlines()), 1, message)
        self.assertIn("hint:", message)
        for fragment in fragments:
            self.assertIn(fragment, message)

    def test_unknown_model(self):
        self.assert_refused(lambda: trainfit.estimate("resnet5", batch=2), "unknown model 'resnet5'")

    def test_unknown_keyword(self):
        with self.assertRaises(TypeError):
            trainfit.estimate("resnet50", no_such_option=3)
        self.assert_refused(lambda: trainfit.compare([dict(model="resnet50", batchh=2),
                                                      dict(model="act")]),
                            "unknown option 'batchh'", "did you mean 'batch'")

    def test_bad_default_device(self):
        self.assert_refused(lambda: trainfit.estimate("act", default_device="gpu"),
                            "default_device gpu is not a device")

    def test_bad_link(self):
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, gpu="rtx4090",
                                                      link="pcie9"), "pcie9")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, gpu="rtx4090",
                                                      bus_bandwidth=-1), "bandwidth")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, link="pcie4"),
                            "needs a GPU")

    def test_wrong_types(self):
        self.assert_refused(lambda: trainfit.estimate("resnet50", batch="8"), "batch must be an int")
        self.assert_refused(lambda: trainfit.estimate("resnet50", input=(3, 0, 224)), "positive")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpu_memory=-5), "positive")
        self.assert_refused(lambda: trainfit.estimate("resnet50", batch=2**70), "64 bits")
        self.assert_refused(lambda: trainfit.estimate("resnet50", precision="fp64"),
                            "unknown precision 'fp64'")

    def test_bad_value(self):
        self.assert_refused(lambda: trainfit.estimate("resnet50", batch=0), "batch")
        self.assert_refused(lambda: trainfit.fit("resnet50", gpu="rtx9999"), "rtx9999")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpu_profile="/no/such.json"),
                            "cannot open GPU profile")
        self.assert_refused(lambda: trainfit.fit("resnet50", gpu="rtx4090", what_if=True,
                                                 rank="fast"), "rank 'fast'")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, strategy="zero3"),
                            "not modelled yet")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gradient_as_bucket_view=True),
                            "ddp")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, strategy="fsdp",
                                                      fsdp_wrap=["layer9"]), "layer9")
        self.assert_refused(lambda: trainfit.estimate("resnet50", gpus=2, strategy="fsdp",
                                                      fsdp_sharding="hybrid"), "hybrid")
        self.assert_refused(lambda: trainfit.estimate("resnet50", baseline_lr=0.1),
                            "--baseline-lr needs --baseline-batch")
        self.assert_refused(lambda: trainfit.estimate("resnet50", loop="later"), "later")
        self.assert_refused(lambda: trainfit.estimate("resnet50", grad_scaler_skips=2),
                            "amp-fp16 only")
        self.assert_refused(lambda: trainfit.estimate("resnet50", grad_accum=10**9),
                            "--grad-accum 1000000000 over the model's 177 ops")
        self.assert_refused(lambda: trainfit.estimate("resnet50", grad_accum=2**40), "too large")
        self.assert_refused(lambda: trainfit.estimate("gpt2", set={"n_layer": 10**9}),
                            "must be at most 10000")

    def test_language_models(self):
        config = os.path.join(EXAMPLES, "llama-3.2-1b.json")
        self.assert_refused(lambda: trainfit.estimate(hf_config="/no/config.json"),
                            "cannot open config")
        self.assert_refused(lambda: trainfit.estimate("llama", hf_config=config),
                            "give one of")
        self.assert_refused(lambda: trainfit.estimate(hf_config=config, lora={"r": 0}),
                            "r=0 is not a rank")
        self.assert_refused(lambda: trainfit.estimate(hf_config=config, gpus=2, strategy="fsdp",
                                                      lora={"quant": "nf4"}),
                            "--lora quant= with sharded parameters")
        self.assert_refused(lambda: trainfit.estimate(hf_config=config, lora="target=lm"),
                            "target 'lm' matches no Linear module")
        self.assert_refused(lambda: trainfit.estimate("resnet50", baseline_batch=8,
                                                      baseline_lr="fast"), "baseline_lr")

    def test_malformed_trace(self):
        self.assert_refused(lambda: trainfit.estimate(trace={"format": "something else"}),
                            "format")
        self.assert_refused(lambda: trainfit.estimate(trace="/no/such/file.json"),
                            "cannot open trace")

    def test_trace_fixes_the_model(self):
        self.assert_refused(lambda: trainfit.estimate(trace=tiny_trace(4), precision="amp-bf16"),
                            "--precision")

    def test_not_built(self):
        code = ("import trainfit\n"
                "try:\n    trainfit.estimate('resnet50')\n"
                "except ImportError as e:\n    print(e)\n")
        env = dict(os.environ, TRAINFIT_BUILD="/nonexistent-build")
        python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
        env["PYTHONPATH"] = python
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, check=True)
        self.assertIn("scripts/setup.sh", done.stdout)
        self.assertIn("/nonexistent-build/python/trainfit", done.stdout)



# ---- The option table: every row, every command that lists it, the same from both front ends.

LLAMA = os.path.join(EXAMPLES, "llama-3.2-1b.json")
H100_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "validation",
                            "gpu_results", "NVIDIA_H100_80GB_HBM3", "h100-profile.json")
GPT2 = dict(model="gpt2", set={"n_layer": 1}, seq_len=32)
TWO = dict(gpus=2)
FSDP = dict(gpus=2, strategy="fsdp")
# A value for each option, with what it needs beside it (a model of its kind, more GPUs). A row
# without one fails the walk: a new option brings its sample.
SAMPLES = {
    "model": dict(model="resnet18"),
    "hf_config": dict(hf_config=LLAMA, set={"num_hidden_layers": 1}, seq_len=32),
    "trace": "a trace",  # made in setUpClass
    "set": dict(set={"num_classes": 10}),
    "batch": dict(batch=4),
    "input": dict(input=(3, 48, 48)),
    "seq_len": dict(GPT2, seq_len=48),
    "precision": dict(precision="amp-bf16"),
    "device_profile": dict(device_profile="cuda"),
    "freeze": dict(freeze=["layer1"]),
    "lora": dict(hf_config=LLAMA, set={"num_hidden_layers": 1}, seq_len=32,
                 lora={"r": 4, "dropout": 0.1, "target": ["q_proj", "v_proj"]}),
    "optimizer": dict(optimizer="sgd"),
    "optimizer_impl": dict(optimizer_impl="foreach"),
    "default_device": dict(default_device="cuda"),
    "weight_decay": dict(weight_decay=0.1),
    "checkpoint": dict(checkpoint=["layer1"]),
    "checkpoint_reentrant": dict(checkpoint=["layer1"], checkpoint_reentrant=True),
    "grad_accum": dict(grad_accum=2),
    "grad_scaler_skips": dict(precision="amp-fp16", grad_scaler_skips=1),
    "cudnn_benchmark": dict(cudnn_benchmark=True),
    "zero_grad_set_to_none": dict(zero_grad_set_to_none=False),
    "loop": dict(loop="scoped"),
    "gpus": dict(gpus=2),
    "nodes": dict(TWO, nodes=2),
    "network": dict(TWO, nodes=2, network=200.0),
    "strategy": dict(TWO, strategy="ddp"),
    "bucket_cap_mb": dict(TWO, bucket_cap_mb=10.0),
    "gradient_as_bucket_view": dict(TWO, gradient_as_bucket_view=True),
    "fsdp_wrap": dict(FSDP, fsdp_wrap=["layer1"]),
    "fsdp_sharding": dict(FSDP, fsdp_sharding="shard_grad_op"),
    "fsdp_mixed_precision": dict(GPT2, **FSDP, fsdp_wrap=["transformer.h.*"],
                                 fsdp_mixed_precision="bf16"),
    "find_unused_parameters": dict(TWO, find_unused_parameters=True),
    "broadcast_buffers": dict(TWO, broadcast_buffers=False),
    "tf32": dict(tf32=True),
    "memory_format": dict(memory_format="channels_last"),
    "dataset_size": dict(dataset_size=1000),
    "baseline_batch": dict(baseline_batch=64),
    "baseline_lr": dict(baseline_batch=64, baseline_lr=0.1),
    "gpu": dict(gpu="a100-80gb"),
    "gpu_memory": dict(gpu=None, gpu_memory="24GiB"),
    "gpu_profile": dict(gpu="h100-80gb", gpu_profile=H100_PROFILE),
    "link": dict(TWO, link="nvlink3"),
    "bus_bandwidth": dict(TWO, bus_bandwidth=9.5),
    "cuda_context": dict(cuda_context="600MiB"),
    "expandable_segments": dict(expandable_segments=True),
    "max_split_size": dict(max_split_size="128MiB"),
    "margin": dict(margin="10%"),
}
# Each command's request around the sample; what the sample gives wins.
BASES = {
    "estimate": dict(model="resnet18", input=(3, 32, 32), gpu="rtx4090"),
    # Large images on a small card: few batches fit, so the search is short.
    "fit": dict(model="resnet18", input=(3, 512, 512), gpu="rtx3060"),
    "summary": dict(model="resnet18", input=(3, 32, 32)),
    "launch": dict(model="resnet18", input=(3, 32, 32), gpu="rtx4090", gpus=2,
                   baseline_batch=64, baseline_lr=0.1),
    "compare": dict(model="resnet18", input=(3, 32, 32), gpu="rtx4090"),
    "loader": dict(model="resnet18", input=(3, 32, 32), gpu="rtx4090", batch=4),
}
LOADER_PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "loader",
                              "decode.json")
# Keywords of the Python functions that are not request options: the function's own.
NOT_OPTIONS = {
    "estimate": {"example_batch", "loss_fn", "explain", "timeline"},
    "fit": {"example_batch", "loss_fn", "what_if", "target_batch", "allow_model_changes", "rank"},
    # optimizer: what a live torch.nn.Module is traced with; a zoo model's summary has none.
    "summary": {"example_batch", "loss_fn", "depth", "optimizer"},
    "launch": {"cores"},
}


def request_of(command, sample):
    """The base request of `command` with `sample`'s keywords; a sample that names its model
    (another zoo model, a config.json, a trace) replaces the base's model and input."""
    options = dict(BASES[command])
    if {"trace", "hf_config"} & set(sample) or sample.get("model", "resnet18") != "resnet18":
        options.pop("model")
        options.pop("input")
    options.update(sample)
    return {k: v for k, v in options.items() if v is not None}


def words_of(rows, options):
    """The command line of keyword options, in the table's order (the model first)."""
    words = []
    for row in rows:
        if row["key"] not in options:
            continue
        value = options[row["key"]]
        if row["kind"] == "bool":
            if value != (row["default"] == "true"):
                words.append(row["flag"])
        elif row["kind"] == "key=value":
            for k, v in value.items():
                words += [row["flag"], f"{k}={v}"]
        elif row["kind"] == "lora":
            words += [row["flag"], ",".join(
                f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in value.items())]
        elif row["kind"] == "shape":
            words += [row["flag"], "x".join(str(d) for d in value)]
        elif row["kind"] == "list":
            for item in value:
                words += [row["flag"], item]
        else:
            words += [row["flag"], value if isinstance(value, str) else f"{value:g}"
                      if isinstance(value, float) else str(value)]
    return words


class OptionTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = trainfit.api._binding().request_options()
        cls.scratch = tempfile.TemporaryDirectory()
        path = os.path.join(cls.scratch.name, "tiny.trace.json")
        tiny_trace(8, path)
        SAMPLES["trace"] = dict(trace=path)

    @classmethod
    def tearDownClass(cls):
        cls.scratch.cleanup()

    def test_the_functions_take_what_the_table_gives_their_commands(self):
        functions = {"estimate": trainfit.estimate, "fit": trainfit.fit,
                     "summary": trainfit.summary, "launch": trainfit.launch}
        for command, function in functions.items():
            with self.subTest(command=command):
                parameters = inspect.signature(function).parameters
                taken = {r["key"] for r in self.rows if command in r["commands"]}
                self.assertEqual(set(parameters) - NOT_OPTIONS[command], taken)
                for row in self.rows:
                    p = parameters.get(row["key"])
                    if p is None or p.default in (None, inspect.Parameter.empty):
                        continue
                    default = ("true" if p.default else "false") if isinstance(p.default, bool) \
                        else str(p.default)
                    self.assertEqual(default, row["default"], row["key"])

    def test_every_row_has_a_flag_help_and_a_sample(self):
        flags = [r["flag"] for r in self.rows]
        self.assertEqual(len(flags), len(set(flags)))
        for row in self.rows:
            self.assertIn(row["key"], SAMPLES)
            self.assertTrue(row["help"] and "\n" not in row["help"], row["key"])
            self.assertEqual(row["flag"].lstrip("-").replace("no-", "", 1 if row["default"] ==
                                                             "true" else 0).replace("-", "_"),
                             row["key"])

    def test_every_row_is_taken_by_each_command_that_lists_it(self):
        compared = []  # compare takes them all at once: one process, one in-process call
        for row in self.rows:
            for command in row["commands"]:
                options = request_of(command, SAMPLES[row["key"]])
                self.assertIn(row["key"], options)
                if command == "compare":
                    compared.append(options)
                    continue
                with self.subTest(option=row["key"], command=command):
                    words = words_of(self.rows, options)
                    if command == "loader":  # the command line's alone: Python has none
                        plan = cli_json("loader", "--profile", LOADER_PROFILE, *words)
                        self.assertEqual(plan["batch"], options.get("batch", 4))
                        continue
                    model = options.pop("model", None)
                    got = getattr(trainfit, command)(model, **options)
                    self.assertEqual(got, cli_json(command, *words))
        words = [w for options in compared for w in words_of(self.rows, options)]
        got = trainfit.compare(compared)
        self.assertEqual(got, cli_json("compare", *words))
        self.assertEqual(len(got["models"]), len(compared))

    def test_a_refused_option_says_why(self):
        for row in self.rows:
            for command in row["refused"]:
                with self.subTest(option=row["key"], command=command):
                    key = row["key"]
                    options = request_of(command, {key: SAMPLES[key][key]})
                    extra = ["--profile", LOADER_PROFILE] if command == "loader" else []
                    done = subprocess.run([TRAINFIT, command, *extra,
                                           *words_of(self.rows, options)],
                                          capture_output=True, text=True)
                    self.assertEqual(done.returncode, 2)
                    self.assertIn(row["refusal"], done.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainfit", required=True, help="the trainfit binary")
    known, rest = parser.parse_known_args()
    TRAINFIT = known.trainfit
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
