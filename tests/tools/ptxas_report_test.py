#!/usr/bin/env python3
"""Tests of scripts/ptxas_report.py (ctest tools_ptxas_report; standard library only, no nvcc):
the parser on ptxas output as nvcc 13 writes it with -Xptxas -v, and the exit status."""
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import ptxas_report as pr  # noqa: E402

A = "_ZN9driftless6layers3gpu4fast4sm9013dkv_dq_kernelINS3_9BwdTraitsILi64EEENS2_7ModNoneELb0ELb1EEEvv"
B = "_ZN9driftless6layers3gpu4fast4sm9013dkv_dq_kernelINS3_9BwdTraitsILi128EEENS2_7ModNoneELb0ELb1EEEvv"

# ptxas's notes about a kernel come before its entry line (the kernels of one file are
# compiled in reverse order), each naming the kernel.
SERIALISED = f"""\
ptxas info    : (C7517) warpgroup.wait is injected in around line 63513 by compiler to allow use of registers defined by GMMA in function '{A}'
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function '{A}'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{B}' for 'sm_90a'
ptxas info    : Function properties for {B}
    160 bytes stack frame, 332 bytes spill stores, 380 bytes spill loads
ptxas info    : Used 168 registers, used 4 barriers, 160 bytes cumulative stack size
ptxas info    : Compiling entry function '{A}' for 'sm_90a'
ptxas info    : Function properties for {A}
    104 bytes stack frame, 172 bytes spill stores, 180 bytes spill loads
ptxas info    : Used 168 registers, used 4 barriers, 104 bytes cumulative stack size
"""
CLEAN = "\n".join(l for l in SERIALISED.splitlines() if "(C75" not in l) + "\n"


class Parse(unittest.TestCase):
    def test_registers_spills_and_stack_of_each_kernel(self):
        ks = {k["name"]: k for k in pr.parse(CLEAN)}
        self.assertEqual(set(ks), {A, B})
        self.assertEqual((ks[B]["registers"], ks[B]["spill_stores"], ks[B]["spill_loads"],
                          ks[B]["stack"]), (168, 332, 380, 160))
        self.assertEqual((ks[A]["spill_stores"], ks[A]["spill_loads"], ks[A]["stack"]),
                         (172, 180, 104))
        self.assertEqual(ks[A]["notes"], [])

    def test_notes_go_to_the_kernel_they_name_not_the_one_compiled_last(self):
        ks = {k["name"]: k for k in pr.parse(SERIALISED)}
        self.assertEqual(ks[A]["notes"], ["C7517", "C7514"])
        self.assertEqual(ks[B]["notes"], [])

    def test_a_note_without_a_kernel_name_goes_to_the_current_kernel(self):
        text = CLEAN + "ptxas info    : (C7512) wgmma serialized: too few registers\n"
        ks = {k["name"]: k for k in pr.parse(text)}
        self.assertEqual(ks[A]["notes"], ["C7512"])


class Exit(unittest.TestCase):
    def run_log(self, text, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        out, err = io.StringIO(), io.StringIO()
        try:
            with redirect_stdout(out), redirect_stderr(err):
                status = pr.main(["--log", f.name, *args])
        finally:
            os.unlink(f.name)
        return status, out.getvalue(), err.getvalue()

    def test_serialised_wgmma_fails_and_names_the_kernel(self):
        status, out, err = self.run_log(SERIALISED)
        self.assertEqual(status, 1)
        self.assertIn("C7514", err)
        self.assertTrue("BwdTraits<64>" in err or A in err, err)  # c++filt's name, or the symbol
        self.assertFalse("BwdTraits<128>" in err or B in err, err)

    def test_clean_output_passes_and_lists_every_kernel(self):
        status, out, _ = self.run_log(CLEAN)
        self.assertEqual(status, 0)
        self.assertEqual(len(out.strip().splitlines()), 3)  # header and two kernels
        self.assertIn("332/380", out)

    def test_filter_keeps_the_matching_kernels_only(self):
        status, out, _ = self.run_log(SERIALISED, "--filter", "128")
        self.assertEqual(status, 0)  # the serialised D = 64 kernel is filtered out
        self.assertEqual(len(out.strip().splitlines()), 2)

    def test_output_without_kernels_is_an_error(self):
        status, _, err = self.run_log("nvcc: nothing\n")
        self.assertEqual(status, 2)
        self.assertIn("-Xptxas -v", err)


if __name__ == "__main__":
    unittest.main()
