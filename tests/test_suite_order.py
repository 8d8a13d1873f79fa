"""The suite's own scheduling (tests/conftest.py): the files it runs first exist, and each file's tests stay
together and in order, as ``--dist loadfile`` and module fixtures need."""

from pathlib import Path

from conftest import LONG_FILES, _scheduling_rank

TESTS = Path(__file__).resolve().parent


def test_every_long_file_named_exists():
    assert len(set(LONG_FILES)) == len(LONG_FILES)
    for name in LONG_FILES:
        assert (TESTS / name).is_file(), f"tests/conftest.py LONG_FILES names {name}, which is not there"


class _Item:
    def __init__(self, path, name):
        self.path, self.name = path, name


def test_long_files_come_first_and_each_files_tests_keep_their_order():
    short, many, long_ = TESTS / "a_short.py", TESTS / "b_many.py", TESTS / LONG_FILES[0]
    items = [_Item(short, "s1"), _Item(many, "m1"), _Item(short, "s2"), _Item(long_, "l1"), _Item(many, "m2"),
             _Item(many, "m3"), _Item(long_, "l2")]
    rank = _scheduling_rank(items)
    ordered = sorted(items, key=lambda item: rank[item.path])
    assert [item.name for item in ordered] == ["l1", "l2", "m1", "m2", "m3", "s1", "s2"]
