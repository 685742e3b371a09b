"""The frontier's Lua scripts: each KEYS and ARGV name declared once, and every one used."""

from __future__ import annotations

import re

import pytest

from srcrawl.core.keys import Keys
from srcrawl.master.frontier import lua
from srcrawl.master.frontier.host_queues import script_keys

_NAMES = re.compile(r"\b([ka])_(\w+)")


def _body(script: lua.LuaScript) -> str:
    """The script's own file and fragments, without the generated prelude."""
    return script.source()[len(script.prelude()) :]


@pytest.mark.parametrize("script", lua.ALL, ids=lambda s: s.name)
def test_a_script_uses_exactly_the_names_it_declares(script: lua.LuaScript) -> None:
    used = {(kind, name) for kind, name in _NAMES.findall(_body(script))}
    declared = {("k", n) for n in script.keys} | {("a", n) for n in script.argv}
    assert used == declared
    assert "KEYS[" not in _body(script)  # no position written by hand
    assert ("ARGV[" not in _body(script)) or script.rest


@pytest.mark.parametrize("script", lua.ALL, ids=lambda s: s.name)
def test_every_script_compiles(redis_client, script: lua.LuaScript) -> None:
    redis_client.script_load(script.source())


def test_the_frontier_names_every_key_its_scripts_take() -> None:
    named = script_keys(Keys("t"), "srq", "nrq", "in-hand")
    for script in lua.ALL:
        if script is not lua.RECORD_LASTMOD:
            assert len(script.keys_of(named)) == len(script.keys)


def test_arguments_are_taken_by_name() -> None:
    assert lua.TAKE.args_of({"count": 5}) == [5]
    assert lua.COMMIT.argv[-1] == "lag_after"
    with pytest.raises(TypeError):
        lua.TAKE.args_of({"count": 5, "how_many": 6})
    with pytest.raises(TypeError):
        lua.TAKE.args_of({"count": 5}, rest=[1])
