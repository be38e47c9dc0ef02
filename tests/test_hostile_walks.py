"""Issue 26, poor list: work that grew with the input past any need."""

from __future__ import annotations

from hostile import env, nodemap
from nodemap.mapping import plancache


def test_the_cache_key_of_an_input_folder_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(plancache, "MAX_IDENTITY", 50)
    small = tmp_path / "small"
    small.mkdir()
    for i in range(10):
        (small / f"f{i}").write_text("x")
    assert len(plancache.input_identity(str(small))) == 10
    for i in range(60):
        (small / f"g{i}").write_text("x")
    one, = plancache.input_identity(str(small))  # not cached: a key of its own, every time
    assert "over 50 entries" in one and one != plancache.input_identity(str(small))[0]


def test_run_input_root_does_not_walk_the_file_tree(tmp_path):
    """`--input /` (the live machine read through its root) once walked
    every file for the plan cache's key: 22 s on the 2-vCPU CI VM."""
    r = nodemap("run", "--local-rank", "0", "--local-size", "1", "--input", "/", "--dry-run", "--", "true",
                env_=env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.seconds < 8
