"""trainfit.estimate and trainfit.fit on a live torch.nn.Module: traced in process (no files),
the default loss for classifiers and segmenters, one-line errors for what needs a loss_fn, and
convnext_tiny (which a trace at batch 1 cannot extrapolate) against real PyTorch within 1%.

    TRAINFIT_BUILD=build/release /usr/bin/python3 tests/python/live_test.py
"""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "validation"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainfit  # noqa: E402


def tiny_classifier():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, 10))


class DictOutput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return {"out": self.conv(x), "aux": self.conv(x).mean()}


class PerSample(torch.nn.Module):
    """Its ops depend on the batch size: one linear call per sample."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.stack([self.fc(row) for row in x])


class Attention(torch.nn.Module):
    """One nn.MultiheadAttention over 256 tokens of 32 (4 heads), asking for its weights or
    not, and a classifier head."""

    def __init__(self, need_weights):
        super().__init__()
        self.need_weights = need_weights
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=self.need_weights)
        return self.head(y.mean(1))


class Live(unittest.TestCase):
    def test_classifier_estimates_like_its_trace(self):
        model = tiny_classifier()
        state = [t.clone() for t in list(model.parameters()) + list(model.buffers())]
        live = trainfit.estimate(model, torch.randn(2, 3, 16, 16), batch=32,
                                 device_profile="cpu", optimizer="sgd")
        unchanged = [torch.equal(before, after) for before, after in
                     zip(state, list(model.parameters()) + list(model.buffers()))]
        unchanged.append(all(p.grad is None for p in model.parameters()))
        traced = trainfit.trace(model, lambda n: (torch.randn(n, 3, 16, 16),
                                                  torch.randint(0, 10, (n,))),
                                F.cross_entropy, lambda p: torch.optim.SGD(p, lr=0.01),
                                batch_sizes=(2, 3))
        from_trace = trainfit.estimate(trace=traced, batch=32, device_profile="cpu")
        self.assertEqual(live["peak_allocated_bytes"], from_trace["peak_allocated_bytes"])
        self.assertEqual(live["parameters"], sum(p.numel() for p in model.parameters()))
        # Tracing trains the model; its weights, BatchNorm statistics and mode are put back.
        self.assertTrue(model.training)
        self.assertTrue(all(unchanged))

    def test_the_example_batch_is_not_in_the_estimate(self):
        """The training step holds its own batches, not the caller's example: token ids of a
        large example estimate like those of a small one, and like a trace that never saw it."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(500, 16), torch.nn.Flatten(),
                                    torch.nn.Linear(16 * 32, 10))

        def peak(example):
            return trainfit.estimate(model, example, batch=8, device_profile="cpu",
                                     optimizer="sgd")["peak_allocated_bytes"]

        small = peak(torch.randint(0, 500, (2, 32)))
        self.assertEqual(small, peak(torch.randint(0, 500, (256, 32))))
        traced = trainfit.trace(model, lambda n: (torch.randint(0, 500, (n, 32)),
                                                  torch.randint(0, 10, (n,))),
                                F.cross_entropy, lambda p: torch.optim.SGD(p, lr=0.01),
                                batch_sizes=(2, 3))
        self.assertEqual(small, trainfit.estimate(trace=traced, batch=8,
                                                  device_profile="cpu")["peak_allocated_bytes"])

    def test_amp_traces_under_the_estimates_autocast(self):
        """precision="amp-bf16" on a live model traces it under the autocast of the profile
        the estimate is for: the same figures as a trace made so by hand."""
        model = tiny_classifier()

        def make_batch(n):
            return torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))
        for profile in ("cuda", "cpu"):
            live = trainfit.estimate(model, torch.randn(2, 3, 16, 16), batch=32, optimizer="sgd",
                                     device_profile=profile, precision="amp-bf16")
            traced = trainfit.trace(model, make_batch, F.cross_entropy,
                                    lambda p: torch.optim.SGD(p, lr=0.01), batch_sizes=(2, 3),
                                    autocast=profile)
            self.assertEqual(traced["autocast"], {"dtype": "bfloat16", "lists": profile})
            from_trace = trainfit.estimate(trace=traced, batch=32, device_profile=profile,
                                           precision="amp-bf16")
            self.assertEqual(live["peak_allocated_bytes"], from_trace["peak_allocated_bytes"],
                             profile)
        fp32 = trainfit.trace(model, make_batch, F.cross_entropy,
                              lambda p: torch.optim.SGD(p, lr=0.01), batch_sizes=(2, 3))
        with self.assertRaisesRegex(trainfit.Error, "trace it under autocast"):
            trainfit.estimate(trace=fp32, batch=32, precision="amp-bf16")

    def test_attention_cores_replay_fused_on_cuda(self):
        """nn.MultiheadAttention without weights is marked (docs/trace-format.md, "attention"),
        the model and torch are left as they were, and on the cuda profile the core keeps what
        the fused kernel keeps: not the (B*H, L, L) softmax but the output and an fp32
        logsumexp (16 x 256 padded to 32)."""
        original = torch.bmm

        def traced(need_weights):
            torch.manual_seed(0)
            model = Attention(need_weights)
            trace = trainfit.trace(model, lambda n: (torch.randn(n, 256, 32),
                                                     torch.randint(0, 10, (n,))),
                                   F.cross_entropy, lambda p: torch.optim.SGD(p, lr=0.1),
                                   batch_sizes=(2, 3))
            self.assertNotIn("forward", vars(model.attn))
            self.assertIs(torch.bmm, original)
            return trace
        fused, weights = traced(False), traced(True)
        events = fused["runs"][0]["events"]
        roles = sorted(e["attention"]["role"] for e in events if "attention" in e)
        self.assertEqual(roles, sorted(["output", "grad_q", "grad_k", "grad_v"] * 2))
        self.assertEqual(sum("attention_backward" in e for e in events), 2)
        self.assertFalse(any("attention" in e for e in weights["runs"][0]["events"]))
        kept = {name: trainfit.estimate(trace=trace, batch=8, device_profile="cuda")[
            "activation_bytes"] for name, trace in (("fused", fused), ("weights", weights))}
        softmax, output, logsumexp = 8 * 4 * 256 * 256 * 4, 8 * 256 * 32 * 4, 8 * 4 * 256 * 4
        self.assertEqual(kept["weights"] - kept["fused"], softmax - output - logsumexp)
        on_cpu = {name: trainfit.estimate(trace=trace, batch=8, device_profile="cpu")[
            "activation_bytes"] for name, trace in (("fused", fused), ("weights", weights))}
        self.assertEqual(on_cpu["weights"], on_cpu["fused"])

    def test_segmenter_gets_a_per_pixel_target(self):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1))
        r = trainfit.estimate(model, torch.randn(2, 3, 8, 8), batch=4, device_profile="cpu")
        self.assertGreater(r["peak_allocated_bytes"], 0)

    def test_fit_on_a_live_model(self):
        r = trainfit.fit(tiny_classifier(), torch.randn(2, 3, 16, 16), gpu="rtx4090")
        self.assertGreater(r["max_batch"], 1000)

    def test_a_dict_output_needs_a_loss(self):
        with self.assertRaises(trainfit.Error) as e:
            trainfit.estimate(DictOutput(), torch.randn(2, 3, 8, 8), batch=4)
        message = str(e.exception)
        self.assertNotIn("\n", message)
        self.assertIn("returns a dict (keys out, aux)", message)
        self.assertIn("loss_fn=", message)
        r = trainfit.estimate(DictOutput(), torch.randn(2, 3, 8, 8), batch=4, device_profile="cpu",
                              loss_fn=lambda out, inputs: out["out"].mean() + out["aux"])
        self.assertGreater(r["peak_allocated_bytes"], 0)

    def test_a_notebook_shows_the_html_report(self):
        for report in (trainfit.estimate("resnet18", batch=2, gpu="rtx4090"),
                       trainfit.fit(tiny_classifier(), torch.randn(2, 3, 16, 16), gpu="rtx4090")):
            html = report._repr_html_()
            self.assertTrue(html.startswith("<iframe srcdoc=\"&lt;!DOCTYPE html&gt;"))
            self.assertIn("id=&quot;trainfit-data&quot;", html)
            self.assertIn("data-chart=&quot;", html)
        self.assertIsInstance(report, dict)

    def test_bad_arguments_are_one_line(self):
        cases = [
            lambda: trainfit.estimate(tiny_classifier(), batch=4),
            lambda: trainfit.estimate(tiny_classifier(), torch.randn(2, 3, 16, 16),
                                      optimizer="lion"),
            lambda: trainfit.estimate(tiny_classifier(), "not a tensor"),
            lambda: trainfit.estimate(tiny_classifier(), (torch.randn(2, 3), torch.randn(3, 3))),
            lambda: trainfit.estimate("resnet50", torch.randn(2, 3, 16, 16)),
            lambda: trainfit.estimate(torch.nn.Flatten(0), torch.randn(2, 4)),  # [N * 4]
            lambda: trainfit.estimate(torch.nn.Linear(4, 3), torch.randn(2, 4),
                                      loss_fn=lambda out, inputs: out),  # not a scalar
        ]
        for case in cases:
            with self.assertRaises(trainfit.Error) as e:
                case()
            self.assertNotIn("\n", str(e.exception))
            self.assertIn("(hint: ", str(e.exception))

    def test_ops_that_depend_on_the_batch_are_one_line(self):
        """Traced at batch 2 and 3, a loop over the samples gives runs that do not line up:
        one line that says so and why, not a wrong figure."""
        with self.assertRaises(trainfit.Error) as e:
            trainfit.estimate(PerSample(), torch.randn(2, 4), batch=8)
        message = str(e.exception)
        self.assertNotIn("\n", message)
        self.assertIn("do not line up", message)
        self.assertIn("depend on its data or on the batch size", message)

    def test_a_compiled_model_is_traced_as_the_module_it_wraps(self):
        class Compiled(torch.nn.Module):
            """Stands in for torch.compile's OptimizedModule, which keeps the original in
            _orig_mod (PyTorch 2.x; 1.13 has no torch.compile)."""

            def __init__(self, module):
                super().__init__()
                self._orig_mod = module

            def forward(self, x):
                raise RuntimeError("a compiled graph is not traced")

        model = tiny_classifier()
        x = torch.randn(2, 3, 16, 16)
        self.assertEqual(
            trainfit.estimate(Compiled(model), x, batch=8, device_profile="cpu"),
            trainfit.estimate(model, x, batch=8, device_profile="cpu"))

    def test_summary_of_a_live_model_is_its_module_table(self):
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.resnet18()
        table = trainfit.summary(model, torch.randn(4, 3, 32, 32), device_profile="cpu")
        self.assertEqual(table["batch"], 4)  # the example's batch
        self.assertEqual(table["parameters"], sum(p.numel() for p in model.parameters()))
        rows = {m["path"]: m for m in table["modules"]}
        self.assertEqual(rows[""]["type"], "ResNet")
        self.assertEqual(rows[""]["output_shape"], [4, 1000])
        self.assertEqual(rows["layer2.0.conv1"]["type"], "Conv2d")
        self.assertEqual(rows["layer2.0.conv1"]["output_shape"], [4, 128, 4, 4])
        self.assertEqual(rows["layer2.0.conv1"]["parameters"], 64 * 128 * 9)
        self.assertEqual(rows["layer1"]["parameters"],
                         sum(p.numel() for p in model.layer1.parameters()))
        # Every row's bytes kept for backward at batch 4 are the zoo's resnet18 (same
        # torchvision model) on the cpu profile, to the byte: the model's, every module's, and
        # the loss's, which is a row beside the model's, as in the zoo.
        zoo = trainfit.summary("resnet18", batch=4, input=(3, 32, 32), device_profile="cpu")
        zoo_rows = {m["path"]: m for m in zoo["modules"]}
        self.assertEqual(sorted(rows), sorted(zoo_rows))
        for path, row in rows.items():
            self.assertEqual(row["kept_bytes"], zoo_rows[path]["kept_bytes"], path)
            self.assertEqual(row["depth"], zoo_rows[path]["depth"], path)
        self.assertEqual(rows["loss"]["output_shape"], [])
        self.assertEqual(table["activation_bytes"], zoo["activation_bytes"])
        self.assertIn("&lt;svg", table._repr_html_() or "")

    def test_check_predicts_the_first_step_and_leaves_training_alone(self):
        import io
        model = tiny_classifier()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        out = io.StringIO()
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
        with trainfit.check(model, optimizer, out=out) as check:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].startswith("trainfit.check: batch 8: first step peak allocated"),
                        lines)
        self.assertIn("not on a CUDA GPU", lines[1])
        # The same prediction as estimating the traced model at batch 8 on the cpu profile; the
        # first step's peak is at most the later steps'.
        reference = trainfit.estimate(model, x, batch=8, device_profile="cpu", optimizer="sgd")
        self.assertEqual(check.report["peak_allocated_bytes"],
                         reference["peak_allocated_bytes"])
        self.assertLessEqual(check.predicted["allocated"], reference["peak_allocated_bytes"])
        self.assertGreater(check.predicted["allocated"], 0)
        self.assertIsNone(check.measured)
        # The step itself ran: the optimizer moved the weights once, and no hook is left.
        self.assertFalse(model._forward_pre_hooks)
        silent = io.StringIO()
        with trainfit.check(model, optimizer, enabled=False, out=silent):
            model(x)
        self.assertEqual(silent.getvalue(), "")
        with self.assertRaises(trainfit.Error):
            trainfit.check("resnet50", optimizer)

    def test_convnext_tiny_within_one_percent_of_pytorch_and_no_files(self):
        import torchvision
        from harness import training_peak
        from torch_models import Case
        torch.manual_seed(0)
        model = torchvision.models.convnext_tiny()
        # Run in an empty folder with an empty temporary folder: both stay empty.
        with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as tmp:
            cwd, tempdir = os.getcwd(), tempfile.tempdir
            os.chdir(work)
            tempfile.tempdir = tmp
            try:
                ours = trainfit.estimate(model, torch.randn(2, 3, 128, 128), batch=4,
                                         device_profile="cpu")["peak_allocated_bytes"]
            finally:
                os.chdir(cwd)
                tempfile.tempdir = tempdir
            self.assertEqual(os.listdir(work), [])
            self.assertEqual(os.listdir(tmp), [])

        def make_batch():
            return [torch.randn(4, 3, 128, 128)], [torch.randint(0, 1000, (4,))]
        measured, where = training_peak(Case(model, [], [], F.cross_entropy), "adamw", make_batch)
        error = (ours - measured) / measured
        print(f"\nconvnext_tiny b4 128x128 adamw: torch {measured:,} ({where[0]}, iteration "
              f"{where[1]}), trainfit {ours:,}, {error:+.3%}", flush=True)
        self.assertLessEqual(abs(error), 0.01)


if __name__ == "__main__":
    unittest.main(verbosity=2)
