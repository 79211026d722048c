"""Loaders for published data sets, on a small fixture in the published layout."""

import shutil
from pathlib import Path

import pytest

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.published import (
    CHECKSUMS,
    COGS,
    Source,
    fetch,
    git_blob_id,
    read_cfq,
    read_cogs,
    read_pcfg,
    sha256,
)

FIXTURES = Path(__file__).parent / "fixtures" / "published"


@pytest.fixture
def data(tmp_path):
    """A writable copy of the fixture (loaders record checksums beside the files)."""
    shutil.copytree(FIXTURES, tmp_path / "data")
    return tmp_path / "data"


def test_cogs_reads_every_split_and_records_checksums(data):
    lines = []
    splits = read_cogs(data / "cogs", printer=lines.append, verify_published=False)
    assert {k: len(v) for k, v in splits.items()} == {"train": 3, "iid_valid": 1, "iid_test": 1,
                                                      "ood_test": 2}
    assert splits["ood_test"][0] == ("A cake smiled .",
                                 "* cake ( x _ 1 ) ; smile . agent ( x _ 2 , x _ 1 )",
                                 "subj_to_obj_common")
    sums = (data / "cogs" / CHECKSUMS).read_text()
    assert f"{sha256(data / 'cogs' / 'gen.tsv')}  gen.tsv" in sums and "recorded" in lines[0]
    lines.clear()
    read_cogs(data / "cogs", printer=lines.append, verify_published=False)  # verified, nothing new to record
    assert lines == []


def test_a_changed_file_fails_its_checksum(data):
    read_cogs(data / "cogs", printer=lambda _: None, verify_published=False)
    with (data / "cogs" / "dev.tsv").open("a") as handle:
        handle.write("A dog ran .\t* dog ( x _ 1 ) ; run . agent ( x _ 2 , x _ 1 )\tin_distribution\n")
    with pytest.raises(SglabError, match="dev.tsv does not match its checksum"):
        read_cogs(data / "cogs", printer=lambda _: None, verify_published=False)


def test_git_blob_id_is_what_git_hash_object_prints(tmp_path):
    (tmp_path / "hello").write_bytes(b"hello\n")
    assert git_blob_id(tmp_path / "hello") == "ce013625030ba8dba906f756967f9e9ca394464a"
    (tmp_path / "empty").write_bytes(b"")
    assert git_blob_id(tmp_path / "empty") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_files_must_be_the_pinned_published_version(data, tmp_path):
    # the fixture is not the published COGS: rejected, naming the file and the commit
    with pytest.raises(SglabError, match=r"train.tsv is not the published file") as error:
        read_cogs(data / "cogs", printer=lambda _: None)
    assert COGS.commit[:12] in str(error.value) and "verify_published=false" in str(error.value)
    assert not (data / "cogs" / CHECKSUMS).exists()  # nothing recorded for a rejected copy
    # a file with the pinned blob id passes
    (tmp_path / "pinned").mkdir()
    (tmp_path / "pinned" / "a.txt").write_bytes(b"hello\n")
    source = Source(("a.txt",), None, "somewhere", "0" * 40,
                    {"a.txt": "ce013625030ba8dba906f756967f9e9ca394464a"})
    assert fetch(tmp_path / "pinned", source, printer=lambda _: None) == tmp_path / "pinned"
    (tmp_path / "pinned" / "a.txt").write_bytes(b"hello!\n")
    with pytest.raises(SglabError, match="a.txt is not the published file"):
        fetch(tmp_path / "pinned", source, printer=lambda _: None)


def test_sha256_pins_need_no_record_and_an_unwritable_directory_only_loses_it(tmp_path,
                                                                              monkeypatch):
    (tmp_path / "a.txt").write_bytes(b"hello\n")
    (tmp_path / "b.txt").write_bytes(b"world\n")
    pinned = Source(("a.txt",), None, "somewhere", sha256={"a.txt": sha256(tmp_path / "a.txt")})
    lines = []
    fetch(tmp_path, pinned, printer=lines.append)
    assert lines == [] and not (tmp_path / CHECKSUMS).exists()  # the pin is the check
    fetch(tmp_path, pinned, printer=lines.append, verify_published=False)  # unpinned: recorded
    assert "a.txt" in (tmp_path / CHECKSUMS).read_text() and "recorded" in lines[0]
    (tmp_path / CHECKSUMS).unlink()

    def read_only(directory, sums):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("sglab.tasks.published._write_checksums", read_only)
    lines.clear()
    unpinned = Source(("b.txt",), None, "somewhere")
    assert fetch(tmp_path, unpinned, printer=lines.append) == tmp_path
    assert lines[0].startswith("note: could not record") and "Permission denied" in lines[0]
    assert not (tmp_path / CHECKSUMS).exists()


def test_missing_files_error_names_the_expected_files(data):
    (data / "cogs" / "gen.tsv").unlink()
    with pytest.raises(SglabError) as error:
        read_cogs(data / "cogs")
    message = str(error.value)
    assert "missing gen.tsv" in message and "train.tsv, dev.tsv, test.tsv, gen.tsv" in message
    assert "github.com/najoungkim/COGS" in message
    with pytest.raises(SglabError, match="cfq1.1.tar.gz"):
        read_cfq(data / "nowhere", "mcd1")


def test_malformed_lines_are_reported_with_their_location(data):
    (data / "cogs" / "test.tsv").write_text("only one field\n")
    with pytest.raises(SglabError, match=r"test.tsv:1: expected 3 tab-separated fields"):
        read_cogs(data / "cogs", printer=lambda _: None, verify_published=False)


def test_pcfg_pairs_lines_and_checks_alignment(data):
    splits = read_pcfg(data / "pcfgset", "productivity", printer=lambda _: None,
                  verify_published=False)
    assert splits["ood_test"] == [("reverse copy A1 B2", "B2 A1"),
                              ("echo append A1 , B2 C3", "A1 B2 C3 C3")]
    folder = data / "pcfgset" / "productivity"
    (folder / "train.tgt").write_text("A1 B2\n")
    (folder / CHECKSUMS).unlink()
    with pytest.raises(SglabError, match="line-aligned"):
        read_pcfg(data / "pcfgset", "productivity", printer=lambda _: None,
                  verify_published=False)


def test_cfq_uses_the_entity_masked_fields_with_official_preprocessing(data):
    splits = read_cfq(data / "cfq", "mcd1", printer=lambda _: None)
    assert splits["train"][0] == ("Did M0 direct M1 ?",
                                  "SELECT count(*) WHERE { M0 film.director.film M1 }")
    assert [len(splits[k]) for k in ("train", "ood_valid", "ood_test")] == [2, 1, 1]


def test_published_data_trains_as_a_seq2seq_task(data):
    config = build_run_config({"task": {"name": "cogs", "data_dir": str(data / "cogs"),
                                        "verify_published": False},
                               "model": {"name": "seq2seq", "d_model": 16, "n_heads": 2,
                                         "d_ff": 16, "n_layers": 1}})
    task = build_task(config.task)
    assert task.eval_splits == ["iid_valid", "iid_test", "ood_test"]
    assert task.pairs_text("iid_valid") == [
        ("A dog smiled .", "* dog ( x _ 1 ) ; smile . agent ( x _ 2 , x _ 1 )")]


def test_cli_rejects_an_unpublished_copy_with_status_2(data, tmp_path, capsys):
    from sglab.cli import main

    runs = tmp_path / "runs"
    status = main(["train", "--task", "cogs", "--model", "seq2seq",
                   "--set", f"task.data_dir={data / 'cogs'}", "--runs-dir", str(runs)])
    assert status == 2
    assert "train.tsv is not the published file" in capsys.readouterr().err
    assert not list(runs.glob("cogs-*"))  # no half-made run directory
