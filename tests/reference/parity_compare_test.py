#!/usr/bin/env python3
"""Tests of parity_compare.py's verdict on made-up curves (ctest reference_parity_compare;
standard library only): windows against the band, the held band past the fp32 run's end,
the tail mean, the final validation loss, and the distance from another run (--against)."""
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_compare as pc  # noqa: E402


def curve(steps, offset=0.0, wiggle=0.0, val_every=100, val_offset=0.0):
    loss = {s: 10 * math.exp(-s / 300) + 3 + offset + wiggle * math.sin(s) for s in range(steps)}
    val = {s: loss[s] + 0.2 + val_offset for s in range(val_every - 1, steps, val_every)}
    return loss, val


class ParityCompare(unittest.TestCase):
    def test_within_the_band_passes(self):
        r = pc.compare(curve(400, wiggle=0.01), curve(400), curve(400, wiggle=0.02))
        self.assertEqual(len(r["windows"]), 4)
        self.assertTrue(all(w["pass"] and w["band_measured"] for w in r["windows"]))
        self.assertTrue(all(r["checks"].values()), r["checks"])
        self.assertAlmostEqual(r["windows"][0]["ratio"], 0.5, delta=0.01)

    def test_a_window_beyond_the_band_fails(self):
        dl = curve(400, wiggle=0.01)
        dl[0].update({s: dl[0][s] + 0.05 for s in range(200, 300)})  # one window off
        r = pc.compare(dl, curve(400), curve(400, wiggle=0.02))
        self.assertEqual([w["pass"] for w in r["windows"]], [True, True, False, True])
        self.assertFalse(r["checks"]["windows"])

    def test_a_short_fp32_run_holds_its_last_band(self):
        fp32 = curve(400, wiggle=0.02)
        fp32 = ({s: v for s, v in fp32[0].items() if s < 250}, fp32[1])
        r = pc.compare(curve(400, wiggle=0.01), curve(400), fp32)
        measured = [w["band_measured"] for w in r["windows"]]
        self.assertEqual(measured, [True, True, False, False])
        self.assertEqual(r["windows"][3]["band"], r["windows"][1]["band"])
        self.assertTrue(r["checks"]["windows"])
        self.assertFalse(r["checks"]["band_complete"])
        self.assertEqual(r["band_steps"], 250)

    def test_tail_and_validation_floors(self):
        # torch bf16 0.001 from torch fp32: 1.5 x that is below the floors, which are the limits.
        fp32 = curve(400, offset=0.001)
        r = pc.compare(curve(400, offset=0.03), curve(400), fp32)
        self.assertAlmostEqual(r["tail_mean"]["relative_difference"], 0.03 / 6.7535, delta=1e-4)
        self.assertEqual(r["tail_mean"]["limit"], 0.005)
        self.assertEqual(r["final_val"]["limit"], 0.01)
        self.assertTrue(r["checks"]["tail"])  # 0.03 / 6.75 = 0.44%: within 0.5%
        self.assertFalse(r["checks"]["val"])  # 0.03 > 0.01 nats
        r = pc.compare(curve(400, offset=0.04), curve(400), fp32)
        self.assertFalse(r["checks"]["tail"])  # 0.04 / 6.75 = 0.59%
        r = pc.compare(curve(400, offset=0.005), curve(400), fp32)
        self.assertTrue(r["checks"]["tail"] and r["checks"]["val"])
        self.assertIn("limit 0.500%: 1.5 x torch bf16's 0.015% from torch fp32, at least 0.5%",
                      pc.table(r))

    def test_tail_and_validation_limits_scale_with_the_band(self):
        # torch bf16 0.03 from torch fp32: the limits are 1.5 x its tail (0.44%) and validation
        # (0.03 nats) distances, 0.67% and 0.045 nats.
        fp32 = curve(400, offset=0.03)
        r = pc.compare(curve(400, offset=0.04), curve(400), fp32)
        self.assertAlmostEqual(r["tail_mean"]["band"], 0.03 / 6.7835, delta=1e-4)
        self.assertAlmostEqual(r["tail_mean"]["limit"], 1.5 * 0.03 / 6.7835, delta=1e-4)
        self.assertAlmostEqual(r["final_val"]["band"], 0.03, delta=1e-9)
        self.assertAlmostEqual(r["final_val"]["limit"], 0.045, delta=1e-9)
        self.assertTrue(r["checks"]["tail"] and r["checks"]["val"])  # 0.59% and 0.04 nats
        r = pc.compare(curve(400, offset=0.05), curve(400), fp32)
        self.assertFalse(r["checks"]["tail"])  # 0.74% > 0.66%
        self.assertFalse(r["checks"]["val"])  # 0.05 > 0.045 nats
        # An fp32 run that ends before the tail and the final validation: the floors.
        short = ({s: v for s, v in fp32[0].items() if s < 250},
                 {s: v for s, v in fp32[1].items() if s < 250})
        r = pc.compare(curve(400, offset=0.04), curve(400), short)
        self.assertIsNone(r["tail_mean"]["band"])
        self.assertEqual((r["tail_mean"]["limit"], r["final_val"]["limit"]), (0.005, 0.01))
        self.assertFalse(r["checks"]["tail"] or r["checks"]["val"])
        self.assertIn("the floor 0.01 nats, torch fp32 not measured there", pc.table(r))

    def test_against_another_run_keeps_the_torch_band(self):
        # A layout 0.005 from the one-GPU run and 0.035 from torch bf16, whose band is 0.02:
        # within it against the one-GPU run, beyond it against torch bf16.
        one_gpu = curve(400, offset=0.03)
        layout = curve(400, offset=0.035)
        r = pc.compare(layout, curve(400), curve(400, offset=0.02), against=one_gpu,
                       names=("dp2", "driftless 1 rank"))
        self.assertAlmostEqual(r["windows"][0]["distance"], 0.005, delta=1e-9)
        self.assertAlmostEqual(r["windows"][0]["band"], 0.02, delta=1e-9)
        self.assertTrue(all(r["checks"].values()), r["checks"])
        self.assertAlmostEqual(r["final_val"]["difference"], 0.005, delta=1e-9)
        self.assertIn("mean abs(dp2 - driftless 1 rank)", pc.table(r))
        r = pc.compare(layout, curve(400), curve(400, offset=0.02))
        self.assertFalse(r["checks"]["windows"])
        self.assertEqual(pc.passed(r), "FAIL")

    def test_a_rerun_widens_the_band(self):
        # A layout 0.035 from the one-GPU run; torch bf16's band 0.02 (limit 0.03), the one-GPU
        # run's rerun 0.03 from it (limit 0.045): beyond the first, within the second.
        one_gpu = curve(400, offset=0.03)
        layout = curve(400, offset=0.065)
        args = (layout, curve(400), curve(400, offset=0.02))
        plain = pc.compare(*args, against=one_gpu, names=("dp2", "driftless 1 rank"))
        self.assertFalse(plain["checks"]["windows"] or plain["checks"]["val"])
        r = pc.compare(*args, against=one_gpu, names=("dp2", "driftless 1 rank"),
                       rerun=curve(400, offset=0.06))
        w = r["windows"][0]
        self.assertAlmostEqual(w["torch_band"], 0.02, delta=1e-9)
        self.assertAlmostEqual(w["rerun_spread"], 0.03, delta=1e-9)
        self.assertAlmostEqual(w["band"], 0.03, delta=1e-9)
        self.assertAlmostEqual(w["ratio"], 0.035 / 0.03, delta=1e-9)
        self.assertAlmostEqual(r["final_val"]["limit"], 0.045, delta=1e-9)
        self.assertTrue(all(r["checks"].values()), r["checks"])
        text = pc.table(r)
        self.assertIn("| mean abs(rerun - driftless 1 rank) |", text)
        self.assertIn("the larger of torch bf16's 0.0200 from torch fp32 and the rerun's 0.0300 "
                      "from driftless 1 rank", text)
        # A rerun nearer than the band changes nothing.
        r = pc.compare(*args, against=one_gpu, rerun=curve(400, offset=0.035))
        self.assertAlmostEqual(r["windows"][0]["band"], 0.02, delta=1e-9)
        self.assertFalse(r["checks"]["windows"])

    def test_metrics_files_and_exit_status(self):
        with tempfile.TemporaryDirectory() as d:
            for name, (loss, val) in {"dl": curve(300, wiggle=0.01), "bf": curve(300),
                                      "fp": curve(300, wiggle=0.02)}.items():
                os.makedirs(os.path.join(d, name))
                with open(os.path.join(d, name, "metrics.jsonl"), "w") as f:
                    for s in range(300):
                        f.write(json.dumps({"step": s, "loss": loss[s], "lr": 1e-3}) + "\n")
                        if s in val:
                            f.write(json.dumps({"step": s, "val_loss": val[s]}) + "\n")
            sys.argv = ["parity_compare.py", *(os.path.join(d, n) for n in ("dl", "bf", "fp")),
                        "--json", os.path.join(d, "p.json")]
            self.assertEqual(pc.main(), 0)
            with open(os.path.join(d, "p.json")) as f:
                self.assertEqual(len(json.load(f)["per_step"]), 300)
            # The same run against itself: distance 0 in every window.
            sys.argv = ["parity_compare.py", *(os.path.join(d, n) for n in ("dl", "bf", "fp")),
                        "--against", os.path.join(d, "dl"), "--names", "dl,dl again",
                        "--json", os.path.join(d, "q.json")]
            self.assertEqual(pc.main(), 0)
            with open(os.path.join(d, "q.json")) as f:
                q = json.load(f)
            self.assertEqual(q["names"], {"run": "dl", "reference": "dl again"})
            self.assertTrue(all(w["distance"] == 0 for w in q["windows"]))


if __name__ == "__main__":
    unittest.main()
