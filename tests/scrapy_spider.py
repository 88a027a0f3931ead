"""The spider that tests/test_scrapy.py runs with ``python -m scrapy runspider``.

It follows every link to the start URL's host and yields one item ``{"url": ...}`` per
response. Its start requests go through the duplicate filter (``dont_filter=False``,
unlike Scrapy's default start requests), so a resumed or a second process's start page is
filtered like any other page.

Arguments (``-a NAME=VALUE``): ``start_urls``, one or more URLs separated by spaces;
``go_file`` (optional), a path: before its first request the spider creates
``go_file + ".ready.<pid>"`` and waits (at most 60 s) until ``go_file`` exists, so that a
test can start several crawls at the same moment.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor


class SiteSpider(scrapy.Spider):
    """Crawl one local site; one item per page fetched."""

    name = "site"

    def __init__(self, start_urls: str = "", go_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.go_file = go_file
        self.start_urls = start_urls.split()
        origins = {"{0}://{1}/".format(*urlsplit(u)) for u in self.start_urls}
        self.links = LinkExtractor(allow=[re.escape(o) for o in sorted(origins)], deny_extensions=[])

    async def start(self) -> AsyncIterator[Any]:  # Scrapy >= 2.13
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:  # Scrapy < 2.13
        if self.go_file:  # a barrier; blocking the reactor here delays nothing but this crawl
            open(f"{self.go_file}.ready.{os.getpid()}", "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(self.go_file) and time.monotonic() < deadline:
                time.sleep(0.02)
        for url in self.start_urls:
            yield scrapy.Request(url, dont_filter=False)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        yield {"url": response.url}
        if isinstance(response, HtmlResponse):
            for link in self.links.extract_links(response):
                yield response.follow(link.url, callback=self.parse)
