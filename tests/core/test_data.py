"""Unit and property tests of grpo_helpers.data (notebook 01)."""

from __future__ import annotations

import doctest
import json
import re
import shutil
import socket
from pathlib import Path

import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_helpers import arithmetic, data
from grpo_helpers.data import (
    BUNDLED_DIR,
    GSM8KIntegrityError,
    batch_indices,
    extract_gsm8k_answer,
    get_num_steps,
    load_gsm8k,
)
from grpo_helpers.rewards import parse_number


@pytest.mark.parametrize("module", [data, arithmetic], ids=lambda m: m.__name__)
def test_doctests_pass(module) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


# --- load_gsm8k: bundled ------------------------------------------------------


@pytest.fixture(scope="module")
def train() -> Dataset:
    return load_gsm8k("train")


@pytest.fixture(scope="module")
def gsm8k_test() -> Dataset:
    return load_gsm8k("test")


def test_bundled_splits_have_expected_rows(train: Dataset, gsm8k_test: Dataset) -> None:
    assert len(train) == 7473
    assert len(gsm8k_test) == 1319
    assert train.column_names == ["question", "answer"]
    assert gsm8k_test.column_names == ["question", "answer"]
    assert train[0]["question"].startswith("Natalia sold clips to 48 of her friends")
    assert extract_gsm8k_answer(train[0]["answer"]) == "72"


def test_every_bundled_gold_answer_is_a_number(
    train: Dataset, gsm8k_test: Dataset
) -> None:
    for split in (train, gsm8k_test):
        for answer in split["answer"]:
            gold = extract_gsm8k_answer(answer)
            assert parse_number(gold) is not None, gold


def test_bundled_load_is_deterministic() -> None:
    assert (
        load_gsm8k("test", limit=5).to_dict() == load_gsm8k("test", limit=5).to_dict()
    )


@pytest.mark.parametrize(("limit", "expected"), [(0, 0), (3, 3), (10_000, 1319)])
def test_limit_keeps_first_rows(limit: int, expected: int, gsm8k_test: Dataset) -> None:
    rows = load_gsm8k("test", limit=limit)
    assert len(rows) == expected
    assert list(rows["question"]) == list(gsm8k_test["question"][:expected])


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3"])
def test_bad_limit(limit: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k("test", limit=limit)  # type: ignore[arg-type]


def test_unknown_split_and_source_list_valid_ones() -> None:
    with pytest.raises(ValueError, match="choose one of train, test"):
        load_gsm8k("validation")
    with pytest.raises(ValueError, match="choose one of bundled, hub"):
        load_gsm8k("train", source="s3")


def _copy_bundled(tmp_path: Path) -> Path:
    for name in ("train.jsonl", "test.jsonl"):
        shutil.copy(BUNDLED_DIR / name, tmp_path / name)
    return tmp_path


def test_copy_in_other_dir_loads(tmp_path: Path) -> None:
    rows = load_gsm8k("test", data_dir=_copy_bundled(tmp_path), limit=2)
    assert len(rows) == 2


def test_truncated_copy_is_caught(tmp_path: Path) -> None:
    folder = _copy_bundled(tmp_path)
    path = folder / "test.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-10]))
    with pytest.raises(GSM8KIntegrityError) as error:
        load_gsm8k("test", data_dir=folder)
    message = str(error.value)
    assert str(path) in message
    assert "expected 1,319 rows" in message and "found 1,309 rows" in message
    assert "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14" in message
    assert "git checkout -- data/gsm8k/test.jsonl" in message
    assert "source='hub'" in message
    assert isinstance(error.value, ValueError)


def test_edited_copy_with_same_row_count_is_caught(tmp_path: Path) -> None:
    folder = _copy_bundled(tmp_path)
    path = folder / "train.jsonl"
    path.write_bytes(path.read_bytes().replace(b"#### 72", b"#### 73", 1))
    with pytest.raises(GSM8KIntegrityError, match="found 7,473 rows with sha256"):
        load_gsm8k("train", data_dir=folder)


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="git checkout -- data/gsm8k/train"):
        load_gsm8k("train", data_dir=tmp_path)


def _write_rows(folder: Path, rows: list[object]) -> None:
    lines = [json.dumps(row) for row in rows]
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_row_without_final_answer_is_quoted(tmp_path: Path) -> None:
    good = {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"}
    bad = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4, no marker"}
    _write_rows(tmp_path, [good, good, bad])
    with pytest.raises(ValueError, match="row 2 has no '####'") as error:
        load_gsm8k("test", data_dir=tmp_path, verify=False)
    assert "2 + 2 = 4, no marker" in str(error.value)
    # without the checksum it is the checksum that fails first
    with pytest.raises(GSM8KIntegrityError):
        load_gsm8k("test", data_dir=tmp_path)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "", "answer": "#### 1"}], "row 0 has no question"),
        ([{"answer": "#### 1"}], "row 0 has no question"),
        ([{"question": "q", "answer": None}], "row 0 has no '####'"),
        ([["not", "an", "object"]], "row 0 is not a JSON object"),
    ],
)
def test_malformed_rows(tmp_path: Path, rows: list[object], message: str) -> None:
    _write_rows(tmp_path, rows)
    with pytest.raises(ValueError, match=message):
        load_gsm8k("test", data_dir=tmp_path, verify=False)


def test_invalid_json_row(tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text(
        '{"question": "q", "answer": "#### 1"}\n{oops\n'
    )
    with pytest.raises(ValueError, match="row 1 is not valid JSON"):
        load_gsm8k("test", data_dir=tmp_path, verify=False)


# --- load_gsm8k: hub ----------------------------------------------------------


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "all_proxy", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.usefixtures("no_proxy_env")
def test_hub_unreachable_fails_with_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    # how fast it fails is measured by bench/timing_limits.py, not here
    with pytest.raises(ConnectionError) as error:
        load_gsm8k("train", source="hub")
    message = str(error.value)
    assert "source='bundled'" in message and "openai/gsm8k" in message
    assert endpoint in message


@pytest.mark.usefixtures("no_proxy_env")
def test_hub_that_never_answers_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # a socket that listens but never accepts: TCP connects, HTTP never answers
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setattr(data, "HUB_PROBE_TIMEOUT_S", 0.5)
        # how fast it gives up is measured by bench/timing_limits.py, not here
        with pytest.raises(ConnectionError, match="source='bundled'") as error:
            load_gsm8k("test", source="hub")
    # the probe gave up on its 0.5 s timeout (not, say, a refused connection)
    assert re.search(r"timed out|no answer within 0\.5 s", str(error.value))


@pytest.mark.usefixtures("no_proxy_env")
def test_probe_reports_reachable_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802 - the http.server API
            self.send_response(404)  # any HTTP answer means "reachable"
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        assert data._probe_hub(endpoint, 2.0) is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("no_proxy_env")
def test_hub_path_uses_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name: str, config: str, split: str) -> Dataset:
        calls.append((name, config, split))
        return Dataset.from_dict(
            {"question": ["q1", "q2", "q3"], "answer": ["#### 1"] * 3, "extra": [0] * 3}
        )

    monkeypatch.setattr(data, "_probe_hub", lambda endpoint, timeout: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = load_gsm8k("test", source="hub", limit=2)
    assert calls == [("openai/gsm8k", "main", "test")]
    assert rows.column_names == ["question", "answer"]
    assert list(rows["question"]) == ["q1", "q2"]


def test_hub_rows_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    bad = Dataset.from_dict({"question": ["q"], "answer": ["no marker"]})
    monkeypatch.setattr(data, "_probe_hub", lambda endpoint, timeout: None)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: bad)
    with pytest.raises(ValueError, match="row 0 has no '####'"):
        load_gsm8k("train", source="hub")


def test_hub_rejects_data_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="data_dir"):
        load_gsm8k("train", source="hub", data_dir=tmp_path)


# --- extract_gsm8k_answer -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Natalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72", "72"),
        ("#### 1,000", "1000"),
        ("####-5", "-5"),
        ("#### 18.", "18"),
        ("work\n#### 3\nsomething after", "3"),
    ],
)
def test_extract_gsm8k_answer(text: str, expected: str) -> None:
    assert extract_gsm8k_answer(text) == expected


@pytest.mark.parametrize("text", ["the answer is 72", "", "####   ", "#### ,"])
def test_extract_gsm8k_answer_missing(text: str) -> None:
    with pytest.raises(ValueError, match="No GSM8K final answer") as error:
        extract_gsm8k_answer(text)
    assert repr(text) in str(error.value)


# --- batch_indices / get_num_steps -----------------------------------------------


def _rows(n: int) -> Dataset:
    return Dataset.from_dict({"question": [f"q{i}" for i in range(n)]})


def _pick(rows, step, batch_size, all_data):
    """The rows of a step, as the loops take them (``_Run.batch``)."""
    return rows.select(batch_indices(len(rows), step, batch_size, all_data))


def test_batch_indices_wrap_around() -> None:
    assert batch_indices(5, 0, 2, False) == [0, 1]
    assert batch_indices(5, 2, 2, False) == [4, 0]
    assert batch_indices(5, 7, 3, False) == [1, 2, 3]
    # a batch bigger than the data wraps around inside the batch
    assert len(batch_indices(5, 0, 12, False)) == 12


def test_batch_indices_all_data_one_pass() -> None:
    rows = _rows(5)
    assert get_num_steps(rows, 100, 2, True) == 3
    assert [batch_indices(5, s, 2, True) for s in range(3)] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="past one pass"):
        batch_indices(5, 3, 2, True)


@pytest.mark.parametrize(
    ("step", "batch_size", "message"),
    [(-1, 2, "step"), (0, 0, "batch_size"), (0, -3, "batch_size"), (1.0, 2, "step")],
)
def test_batch_validation(step: object, batch_size: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _pick(_rows(3), step, batch_size, False)  # type: ignore[arg-type]


def test_batch_of_an_empty_dataset() -> None:
    with pytest.raises(ValueError, match="empty dataset"):
        _pick(_rows(0), 0, 1, False)


def test_get_num_steps() -> None:
    rows = _rows(10)
    assert get_num_steps(rows, 7, 4, False) == 7
    assert get_num_steps(rows, 0, 4, False) == 0
    assert get_num_steps(rows, 7, 4, True) == 3
    assert get_num_steps(rows, 7, 10, True) == 1
    assert get_num_steps(rows, 7, 11, True) == 1
    with pytest.raises(ValueError, match="batch_size"):
        get_num_steps(rows, 7, 0, False)
    with pytest.raises(ValueError, match="steps"):
        get_num_steps(rows, -1, 4, False)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12))
def test_all_data_covers_each_row_exactly_once(n: int, batch_size: int) -> None:
    rows = _rows(n)
    seen: list[str] = []
    n_steps = get_num_steps(rows, 999, batch_size, True)
    for step in range(n_steps):
        batch = list(_pick(rows, step, batch_size, True)["question"])
        assert 1 <= len(batch) <= batch_size
        seen += batch
    assert seen == list(rows["question"])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(0, 50), st.integers(1, 12))
def test_wrap_around_batches_are_full_and_consecutive(
    n: int, step: int, batch_size: int
) -> None:
    batch = list(_pick(_rows(n), step, batch_size, False)["question"])
    expected = [f"q{(step * batch_size + k) % n}" for k in range(batch_size)]
    assert batch == expected
