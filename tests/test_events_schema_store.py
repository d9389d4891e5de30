"""The stored events schema: the shipped copy is the schema the code derives, and a stale or broken copy is never used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alerts import events_schema_store
from alerts.events_schema_store import REFRESH_COMMAND, SHIPPED, fingerprint, load, save


@pytest.fixture()
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "nightjar"


def test_the_shipped_schema_is_the_one_the_code_derives_for_this_code_version(spark) -> None:
    shipped = json.loads(SHIPPED.read_text())
    derived = events_schema_store.derive_events_schema(spark).jsonValue()
    assert shipped["schema"] == derived, f"the parsers changed the events schema: run {REFRESH_COMMAND}"
    assert shipped["fingerprint"] == fingerprint(), f"the schema's sources changed: run {REFRESH_COMMAND}"


def test_a_change_to_any_source_file_is_a_new_code_version(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in events_schema_store.SOURCES:
        source = events_schema_store.REPO_ROOT / name
        if source.is_dir():
            for f in source.rglob("*.py"):
                (root / f.relative_to(events_schema_store.REPO_ROOT)).parent.mkdir(parents=True, exist_ok=True)
                (root / f.relative_to(events_schema_store.REPO_ROOT)).write_bytes(f.read_bytes())
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(source.read_bytes())
    assert fingerprint(root) == fingerprint()  # content and relative paths, not where the checkout is
    parser = root / "ingest" / "parsers" / "sshd.py"
    parser.write_text(parser.read_text() + "\n# a comment is a change too\n")
    assert fingerprint(root) != fingerprint()


def test_a_schema_is_read_back_only_for_its_own_code_version(private_cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(events_schema_store, "SHIPPED", private_cache / "absent.json")
    schema = {"type": "struct", "fields": [{"name": "x", "type": "string", "nullable": True, "metadata": {}}]}
    path = save("v1", schema)
    assert path == private_cache / "events_schema-v1.json"
    assert load("v1") == schema
    assert load("v2") is None
    path.write_text('{"fingerprint": "v1", "schema": ')  # cut short by a crash: ignored, derived again
    assert load("v1") is None
    path.write_text(json.dumps({"fingerprint": "v2", "schema": schema}))  # a file renamed by hand
    assert load("v1") is None


def test_an_unwritable_cache_is_not_an_error(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert save("v1", {"type": "struct", "fields": []}) is None


def test_events_schema_reads_the_stored_schema_instead_of_deriving_it(spark, private_cache, monkeypatch) -> None:
    monkeypatch.setattr(events_schema_store, "SHIPPED", private_cache / "absent.json")
    planted = {"type": "struct", "fields": [{"name": "planted", "type": "long", "nullable": True, "metadata": {}}]}
    save(fingerprint(), planted)
    # A fresh per-context cache for this test, the old one back after it (deleting one key left the planted schema
    # cached for every later test when no earlier test had cached the real one).
    monkeypatch.setattr(events_schema_store, "_SCHEMAS", {})
    assert events_schema_store.events_schema(spark).fieldNames() == ["planted"]


def test_events_schema_derives_and_stores_it_when_nothing_is_stored(spark, private_cache, monkeypatch) -> None:
    monkeypatch.setattr(events_schema_store, "SHIPPED", private_cache / "absent.json")
    # A fresh per-context cache for this test, the old one back after it (deleting one key left the planted schema
    # cached for every later test when no earlier test had cached the real one).
    monkeypatch.setattr(events_schema_store, "_SCHEMAS", {})
    schema = events_schema_store.events_schema(spark)
    assert "event" in schema.fieldNames() and "@timestamp" in schema.fieldNames()
    assert load(fingerprint()) == schema.jsonValue()  # the next start reads it
