#!/usr/bin/env python3
"""Tests of parity_band.py (ctest reference_parity_band; standard library only): the
fingerprint follows the inputs the fp32 curve depends on and nothing else, a band is recorded,
found, refused for other inputs or when incomplete, and extracted as a run directory."""
import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_band as pb  # noqa: E402
import parity_compare as pc  # noqa: E402
import safetensors_io  # noqa: E402

CONFIG = """model:
  architecture: gpt2
  n_layer: 2
  rms_norm_eps: 1e-05
  score_mod_params: {}
data:
  path: /somewhere/train
batch:
  sequence_length: 8
  sequences: 2
optimizer:
  lr: 6e-04
  weight_decay: 0.1
training:
  steps: STEPS
  eval_interval: 2
  eval_batches: 1
  seed: 1
  log_interval: 1
precision:
  compute: bf16
"""


def floats(*v):
    return struct.pack(f"<{len(v)}f", *v)


class ParityBand(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.d, name)

    def inputs(self, steps=4, weight=1.0, extra_config="", meta="a", optimizer_state=0.0):
        with open(self.path("run.yaml"), "w") as f:
            f.write(CONFIG.replace("STEPS", str(steps)) + extra_config)
        safetensors_io.write_raw(self.path("init.safetensors"),
                                 [("model.wte.weight", "F32", [2], floats(weight, 2.0)),
                                  ("optimizer.m.wte.weight", "F32", [1], floats(optimizer_state))],
                                 {"written": meta})
        safetensors_io.write_raw(self.path("batches.safetensors"),
                                 [("train.tokens", "I32", [1], struct.pack("<i", 7))],
                                 {"source": meta})
        return pb.fingerprint(self.path("run.yaml"), self.path("init.safetensors"),
                              self.path("batches.safetensors"))

    def fp32_run(self, steps):
        run = self.path("torch_fp32")
        os.makedirs(run, exist_ok=True)
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for s in range(steps):
                f.write(json.dumps({"step": s, "loss": 5.0 - s / 10, "tokens_per_second": 9.0}) + "\n")
                if s % 2 == 1:
                    f.write(json.dumps({"step": s, "val_loss": 6.0 - s / 10}) + "\n")
        with open(os.path.join(run, "parity_run.json"), "w") as f:
            json.dump({"torch": "2.11", "device": "cuda", "attention": "flex",
                       "tokens_per_second": 8.0, "steady_tokens_per_second": 9.0}, f)
        return run

    def test_the_fingerprint_follows_what_the_fp32_curve_depends_on(self):
        base = self.inputs()["fingerprint"]
        # Not: data paths, seeds, driftless's precision, metadata, optimizer state.
        self.assertEqual(self.inputs(meta="b", optimizer_state=3.0)["fingerprint"], base)
        self.assertEqual(self.inputs(extra_config="run:\n  output_dir: x\n")["fingerprint"], base)
        # But: the step-0 weights, the training length.
        self.assertEqual(set(k for k, v in self.inputs(weight=1.5)["parts"].items()
                             if v != self.inputs()["parts"][k]), {"init"})
        self.assertNotEqual(self.inputs(steps=5)["fingerprint"], base)

    def test_record_check_extract(self):
        fp = self.inputs()
        band = pb.record(fp, self.fp32_run(4), self.path("band.json"))
        self.assertTrue(band["complete"])
        self.assertEqual(band["tokens_per_second"], 9.0)
        path, found = pb.check(fp, [self.path("missing.json"), self.d])
        self.assertEqual(path, self.path("band.json"))
        pb.extract(found, self.path("extracted"))
        loss, val = pc.read_metrics(self.path("extracted"))
        self.assertEqual(loss, {s: 5.0 - s / 10 for s in range(4)})
        self.assertEqual(val, {1: 5.9, 3: 5.7})

    def test_refusals_say_why(self):
        fp = self.inputs()
        pb.record(fp, self.fp32_run(3), self.path("band.json"))
        path, reasons = pb.check(fp, [self.path("band.json")])
        self.assertIsNone(path)
        self.assertIn("incomplete, 3 of 4 steps", reasons[0])
        pb.record(fp, self.fp32_run(4), self.path("band.json"))
        other = self.inputs(weight=3.0)
        path, reasons = pb.check(other, [self.path("band.json"), self.path("none.json")])
        self.assertIsNone(path)
        self.assertIn("the step-0 weights differ", reasons[0])
        self.assertIn("no band recorded", reasons[1])

    def test_exit_status_of_check(self):
        fp = self.inputs()
        with open(self.path("fp.json"), "w") as f:
            json.dump(fp, f)
        sys.argv = ["parity_band.py", "check", "--fingerprint", self.path("fp.json"),
                    self.path("band.json")]
        self.assertEqual(pb.main(), pb.REFUSED)
        pb.record(fp, self.fp32_run(4), self.path("band.json"))
        self.assertEqual(pb.main(), 0)


if __name__ == "__main__":
    unittest.main()
