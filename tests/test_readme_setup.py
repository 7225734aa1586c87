"""The README's set-up line installs what its own examples need."""
import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_setup_line_installs_the_examples_extras():
    line = next(l for l in README.splitlines() if l.startswith("python3 -m venv .venv"))
    extras = set(re.search(r"-e '\.\[([a-z,]+)\]'", line).group(1).split(","))
    assert "test" in extras
    if ".to_frame()" in README:
        assert "frames" in extras, "the examples call .to_frame() (pandas: the frames extra)"
    assert "--index-url https://download.pytorch.org/whl/cpu" in README.replace("\n", " ")
