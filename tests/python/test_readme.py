"""The Python examples of README.md, run verbatim: every ```python block preceded by a `<!-- tested -->` line.

Each block runs in a fresh namespace and must finish without an exception (the examples assert their own
results), so an API change that breaks the README fails here.
"""
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^<!-- tested -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks():
    return BLOCK.findall(README.read_text(encoding="utf-8"))


def test_readme_has_tested_examples():
    # dense, varlen and paged decode; a marker without a block (or a typo in it) would drop an example silently
    assert len(_blocks()) >= 3
    markers = [line for line in README.read_text(encoding="utf-8").splitlines() if line == "<!-- tested -->"]
    assert len(markers) == len(_blocks())


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_example(index):
    code = _blocks()[index]
    exec(compile(code, f"README.md example {index + 1}", "exec"), {"__name__": f"readme_example_{index + 1}"})
