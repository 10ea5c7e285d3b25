#!/usr/bin/env python3
"""Tests of parity_layouts.py on made-up curves (ctest reference_parity_layouts; standard
library only): a layout within the band of both references passes, one off the one-rank run
fails, one that did not train fails, the verdict is the comparison with the one-rank run (whose
band a rerun widens), the batches' single-piece sequences are counted, and a failure outranks
an incomplete band in the summary's status."""
import array
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_layouts as pl  # noqa: E402
from parity_compare_test import curve  # noqa: E402
from safetensors_io import write_raw  # noqa: E402


def write_run(path, loss_val):
    loss, val = loss_val
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for s in sorted(loss):
            f.write(json.dumps({"step": s, "loss": loss[s], "tokens_per_second": 1000.0}) + "\n")
            if s in val:
                f.write(json.dumps({"step": s, "val_loss": val[s]}) + "\n")


def i32(values):
    return array.array("i", values).tobytes()


class ParityLayouts(unittest.TestCase):
    def test_verdicts_and_documents(self):
        with tempfile.TemporaryDirectory() as d:
            runs = {"driftless": curve(300, offset=0.005), "torch_bf16": curve(300),
                    "band": curve(300, offset=0.02), "layouts/dp2": curve(300, offset=0.01),
                    # 0.035 from the one-rank run, 0.04 from torch bf16: beyond a band of 0.02.
                    "layouts/sdp2": curve(300, offset=0.04)}
            for name, c in runs.items():
                write_run(os.path.join(d, name), c)
            os.makedirs(os.path.join(d, "layouts", "cp2_a2a"))  # trained nothing
            # Two steps of two sequences: 1, 3, 1 and 2 document pieces.
            write_raw(os.path.join(d, "batches.safetensors"), [
                ("train.document_counts", "I32", (2, 2), i32([1, 3, 1, 2])),
                ("train.document_lengths", "I32", (7,), i32([8, 2, 3, 3, 8, 5, 3]))], {})
            out = os.path.join(d, "out")
            sys.argv = ["parity_layouts.py", *(os.path.join(d, "layouts", n)
                                               for n in ("dp2", "sdp2", "cp2_a2a")),
                        "--driftless", os.path.join(d, "driftless"),
                        "--torch-bf16", os.path.join(d, "torch_bf16"),
                        "--band", os.path.join(d, "band"),
                        "--batches", os.path.join(d, "batches.safetensors"), "--out", out]
            self.assertEqual(pl.main(), 1)
            with open(os.path.join(out, "layouts.md")) as f:
                text = f.read()
            rows = {line.split("|")[1].strip(): line for line in text.splitlines()
                    if line.startswith("| ") and not line.startswith("| layout")}
            self.assertTrue(rows["dp2"].endswith("| PASS |"), rows["dp2"])
            self.assertTrue(rows["sdp2"].endswith("| FAIL |"), rows["sdp2"])
            self.assertIn("did not train", rows["cp2_a2a"])
            self.assertIn("4, of which 2 (50.0%) hold a single document piece", text)
            self.assertIn("the longest 8 tokens", text)
            self.assertIn("LAYOUTS: FAIL", text)
            with open(os.path.join(out, "sdp2.json")) as f:
                r = json.load(f)
            self.assertFalse(r["torch_bf16"]["checks"]["windows"])  # 0.04 / 0.02 = 2
            self.assertFalse(r["driftless_1rank"]["checks"]["windows"])  # 0.035 / 0.02
            # 0.035 nats beyond 1.5 x torch bf16's 0.02 from torch fp32
            self.assertAlmostEqual(r["driftless_1rank"]["final_val"]["limit"], 0.03, delta=1e-9)
            self.assertFalse(r["driftless_1rank"]["checks"]["val"])
            self.assertIn("at least 0.5% and 0.01 nats: 0.500% and 0.0300 nats", text)
            self.assertTrue(os.path.exists(os.path.join(out, "dp2.md")))
            # Without the failing ones: a pass.
            sys.argv = sys.argv[:2] + sys.argv[4:]  # dp2 alone
            self.assertEqual(pl.main(), 0)

    def test_a_rerun_widens_the_one_rank_band(self):
        with tempfile.TemporaryDirectory() as d:
            # dp2 0.04 from the one-rank run, 0.05 from torch bf16, whose band is 0.02; the
            # rerun lies 0.03 from the one-rank run.
            for name, c in {"driftless": curve(300, offset=0.01), "torch_bf16": curve(300),
                            "band": curve(300, offset=0.02), "rerun": curve(300, offset=0.04),
                            "layouts/dp2": curve(300, offset=0.05)}.items():
                write_run(os.path.join(d, name), c)
            out = os.path.join(d, "out")
            argv = ["parity_layouts.py", os.path.join(d, "layouts", "dp2"),
                    "--driftless", os.path.join(d, "driftless"),
                    "--torch-bf16", os.path.join(d, "torch_bf16"),
                    "--band", os.path.join(d, "band"), "--out", out]
            sys.argv = argv
            self.assertEqual(pl.main(), 1)  # 0.04 / 0.02: beyond the plain band
            sys.argv = argv + ["--rerun", os.path.join(d, "rerun")]
            self.assertEqual(pl.main(), 0)  # 0.04 / 0.03, though 0.05 / 0.02 from torch bf16
            with open(os.path.join(out, "dp2.json")) as f:
                r = json.load(f)
            self.assertFalse(r["torch_bf16"]["checks"]["windows"])
            self.assertAlmostEqual(r["driftless_1rank"]["windows"][0]["band"], 0.03, delta=1e-9)
            with open(os.path.join(out, "layouts.md")) as f:
                text = f.read()
            self.assertIn("| rerun: 1 rank, other rounding | 1000 | ", text)
            self.assertIn("| 1.50 | 0.364% | 0.0300 | (the spread) |", text)
            self.assertIn("LAYOUTS: PASS", text)

    def test_a_failure_outranks_an_incomplete_band(self):
        for a, b, worst in [(0, 2, 2), (2, 1, 1), (1, 2, 1), (0, 1, 1), (0, 0, 0)]:
            self.assertEqual(pl.worse(a, b), worst, (a, b))


if __name__ == "__main__":
    unittest.main()
