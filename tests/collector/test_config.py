"""Configuration: argument > environment > default, errors that name the variable, one config object."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector import CollectorConfig, ConfigError, ToolResultProcessor
from collector import config as C


def test_an_argument_wins_over_the_environment_which_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CollectorConfig.resolve().max_batch_size == 512
    monkeypatch.setenv("TOOLMETER_MAX_BATCH_SIZE", "64")
    assert CollectorConfig.resolve().max_batch_size == 64
    assert CollectorConfig.resolve(max_batch_size=8).max_batch_size == 8
    monkeypatch.setenv("TOOLMETER_PAYLOAD_CAP_BYTES", "2MiB")
    assert CollectorConfig.resolve().payload_cap_bytes == 2 * 1024 * 1024


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("TOOLMETER_MAX_BATCH_SIZE", "lots", "TOOLMETER_MAX_BATCH_SIZE='lots' is not valid; expected int"),
        ("TOOLMETER_STORE_PAYLOADS", "maybe", "expected true or false"),
        ("TOOLMETER_MAX_QUEUED_BYTES", "64 parsecs", "TOOLMETER_MAX_QUEUED_BYTES='64 parsecs' is not a size"),
        (
            "TOOLMETER_ENCODING",
            "p50k_base",
            "encoding='p50k_base' is not supported; use one of o200k_base, cl100k_base",
        ),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as e:
        CollectorConfig.resolve()
    assert says in str(e.value)


def test_the_store_path_has_one_default_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from dashboard.connection import db_path

    assert C.store_path() == db_path([]) == CollectorConfig().db == C.DEFAULT_DB
    monkeypatch.setenv(C.DB_ENV, "elsewhere.duckdb")
    assert C.store_path() == db_path([]) == CollectorConfig.resolve().db == "elsewhere.duckdb"
    assert C.store_path("given.duckdb") == db_path(["--db", "given.duckdb"]) == "given.duckdb"


def test_receiver_settings_come_through_the_config_module(monkeypatch: pytest.MonkeyPatch) -> None:
    assert C.receiver_token() is None and C.max_body_bytes() == C.DEFAULT_MAX_BODY_BYTES
    monkeypatch.setenv(C.RECEIVER_TOKEN_ENV, "s3cret")
    monkeypatch.setenv(C.MAX_BODY_BYTES_ENV, "8MiB")
    assert C.receiver_token() == "s3cret" and C.receiver_token("given") == "given"
    assert C.max_body_bytes() == 8 * 1024 * 1024 and C.max_body_bytes(1000) == 1000
    monkeypatch.setenv(C.MAX_BODY_BYTES_ENV, "64MB!")
    with pytest.raises(ConfigError, match="TOOLMETER_MAX_BODY_BYTES='64MB!' is not a size"):
        C.max_body_bytes()


def test_the_processor_takes_a_whole_config_but_not_mixed_with_separate_settings(tmp_path: Path) -> None:
    config = CollectorConfig(db=str(tmp_path / "c.duckdb"), max_batch_size=7)
    p = ToolResultProcessor(config=config)
    try:
        assert p.config is config
    finally:
        p.shutdown()
    with pytest.raises(ConfigError, match="pass either config= or max_batch_size, not both"):
        ToolResultProcessor(config=config, max_batch_size=3)
