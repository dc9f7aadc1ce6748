"""A store loaded from the sample traces, shared by the dashboard tests."""

from pathlib import Path

import pytest

from collector.config import CollectorConfig
from collector.ingest import ingest_files
from tests.conftest import SAMPLE_TRACES


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("dash") / "samples.duckdb")
    files = sorted(str(p) for p in Path(SAMPLE_TRACES).glob("*.json*"))
    ingest_files(files, CollectorConfig(db=db))
    from collector.alerts.evaluation import evaluate
    from collector.alerts.rules import Rules

    evaluate(db, Rules())
    return db
