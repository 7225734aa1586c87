"""``dir(stepsim)`` lists the verbs, which load on first use (root ``__init__.py``)."""
import stepsim


def test_dir_lists_the_verbs():
    names = dir(stepsim)
    for verb in stepsim.__all__:
        assert verb in names and callable(getattr(stepsim, verb))
    assert "__version__" in names and "annotations" not in names
