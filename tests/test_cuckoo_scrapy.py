"""The Scrapy duplicate filter with MMAPBLOOM_DUPEFILTER_KIND = "cuckoo": forget and retry."""

from __future__ import annotations

from pathlib import Path

import pytest

scrapy = pytest.importorskip("scrapy")

from scrapy import Request  # noqa: E402

from mmapbloom import ConfigError, CuckooFilter  # noqa: E402
from mmapbloom.scrapy import BloomDupeFilter  # noqa: E402


def test_forget_makes_a_failed_request_schedulable_again(tmp_path: Path) -> None:
    path = str(tmp_path / "requests.ckf")
    df = BloomDupeFilter(path, kind="cuckoo", capacity=1000, fp_rate=1e-4)
    a, b = Request("https://a.example/1"), Request("https://a.example/2")
    assert df.request_seen(a) is False and df.request_seen(a) is True
    assert df.forget(a) is True  # the download failed: forget it
    assert df.forget(b) is False  # never seen
    assert df.request_seen(a) is False  # scheduled again (the retry)
    other = BloomDupeFilter(path, kind="cuckoo", capacity=1000, fp_rate=1e-4)  # a second process's view
    assert other.request_seen(a) is True
    other.close("finished")
    df.close("finished")
    with CuckooFilter.open(path) as f:
        assert f.items_added == 1


def test_kind_setting_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        BloomDupeFilter(str(tmp_path / "x"), kind="quotient")
    df = BloomDupeFilter(str(tmp_path / "b.blm"))
    with pytest.raises(TypeError):
        df.forget(Request("https://a.example/"))
    df.close("finished")


def test_from_crawler_kind_cuckoo(tmp_path: Path) -> None:
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(settings_dict={"MMAPBLOOM_DUPEFILTER_KIND": "cuckoo", "JOBDIR": str(tmp_path)})
    df = BloomDupeFilter.from_crawler(crawler)
    assert isinstance(df.filter, CuckooFilter) and df.path == str(tmp_path / "requests.ckf")
    df.close("finished")
