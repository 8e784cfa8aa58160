"""Run the test suite: one line per test, failures with their assertion, a summary line."""

import os
import sys
import unittest


class LineResult(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        print(f"ok    {test.id()}")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        print(f"FAIL  {test.id()}\n      {err[0].__name__}: {err[1]}")

    def addError(self, test, err):
        super().addError(test, err)
        print(f"ERROR {test.id()}\n      {err[0].__name__}: {err[1]}")


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.discover("tests", top_level_dir=".")
    with open(os.devnull, "w") as quiet:  # the per-test lines above replace unittest's own report
        result = unittest.TextTestRunner(resultclass=LineResult, stream=quiet, verbosity=0).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
