"""Numbers in outside text: ASCII digits only (issue 16, item 7). Unicode
digits such as "²" pass str.isdigit() and then make int() raise."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, strategies as st

from hostile import env, nodemap
from nodemap.text import is_decimal, natural_key

# digits of every kind: superscripts, circled, Arabic-Indic, fullwidth, and 0-9
DIGITS = st.sampled_from("0123456789²³¹①⑨٣۴߂０９᧐𝟘")
NAMES = st.text(st.one_of(DIGITS, st.characters()), max_size=12)


@given(st.text(DIGITS, max_size=25))
def test_is_decimal_means_int_reads_it(text):
    if is_decimal(text):
        assert int(text) >= 0 and len(text) <= 18
    assert is_decimal(text) == (0 < len(text) <= 18 and all(c in "0123456789" for c in text))


@given(st.lists(NAMES, max_size=8))
@example(["mlx5_²", "mlx5_1", "²"])
def test_natural_key_never_raises_and_orders_any_names(names):
    ordered = sorted(names, key=natural_key)
    assert sorted(ordered) == sorted(names)


def test_natural_key_orders_numbers_as_numbers():
    assert sorted(["mlx5_10", "mlx5_9", "mlx5_²"], key=natural_key) == ["mlx5_9", "mlx5_10", "mlx5_²"]


@given(st.one_of(NAMES, st.text(DIGITS, min_size=1, max_size=3)))
@example("²")
@example("٣")
def test_global_rank_of_any_launcher_value(value):
    from nodemap.env import global_rank_or

    rank = global_rank_or({"OMPI_COMM_WORLD_RANK": value}, 7)
    assert rank == (int(value) if is_decimal(value, 9) else 7)


@pytest.mark.parametrize("name", ["²", "mlx5_²", "٣"])
def test_a_nic_named_with_unicode_digits_is_one_line_naming_it(tmp_path, name):
    # once a traceback in the NIC sort; since names from files are device names (text.name_problem), refused
    import nodes

    from hostile import refused

    d = nodes.two_socket_four_nics().to_dict()
    d["nics"][1]["name"] = name
    (tmp_path / "n.json").write_text(json.dumps(d))
    r = nodemap("plan", "--input", str(tmp_path / "n.json"), "--tasks", "4", env_=env(tmp_path))
    refused(r, "nics[1].name", ascii(name))
    assert natural_key(name) and natural_key(name) == natural_key(name)  # the sort key itself takes any name


@pytest.mark.parametrize("value", ["60", "100", " 90 ", "", "abc", "-5", "0", "²", "9" * 30, None])
def test_columns_is_what_shutil_gives(monkeypatch, value):
    import shutil

    from nodemap.text import columns

    if value is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", value)
    if value == "9" * 30:  # shutil takes any int; a width past 4 digits is no terminal's
        assert columns(77) == 77
        return
    assert columns(77) == shutil.get_terminal_size((77, 24)).columns


# --- without `re` (off topo's path): each reads as the regular expression it replaced ---

_NAME_CHARS = st.text(st.one_of(st.sampled_from("aZ09_.-:/ \t\n"), DIGITS, st.characters()), max_size=70)


@given(_NAME_CHARS)
def test_natural_key_splits_as_the_regex_did(name):
    import re

    runs = re.split(r"([0-9]+)", name)
    assert natural_key(name) == tuple(int(p) if i % 2 else p for i, p in enumerate(runs))


@given(_NAME_CHARS, st.sampled_from(["device", "id"]))
def test_names_and_slurm_node_names_read_as_the_regexes_did(name, kind):
    import re

    from nodemap.env import slurm_node_name
    from nodemap.text import name_problem

    grammar = {"device": r"[A-Za-z0-9_.-]*", "id": r"[A-Za-z0-9_.:/-]*"}[kind]
    assert (name_problem(name, kind) == "") == bool(len(name) <= 64 and re.fullmatch(grammar, name))
    assert slurm_node_name(name) == bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name))
