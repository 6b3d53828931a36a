"""Translations of offsets seen before, kept across sync cycles: an idle group's offsets are
translated once, not every cycle (docs/design.md §5)."""

from __future__ import annotations

from collections import OrderedDict

from offsetsync.clients import SyncClients
from offsetsync.translate import Request, Translated, Translation, translate_all

# Bounded; an evicted one is translated again.
_CACHE_SIZE = 100_000


class CachedTranslations:
    """The translation of each request, from the cache where it holds one (least recently used
    evicted first), else from `translate_all` in one call for all the others."""

    def __init__(self) -> None:
        self._cache: OrderedDict[Request, Translated] = OrderedDict()

    def translate(
        self,
        clients: SyncClients,
        requests: set[Request],
        source_cluster_id: str,
        *,
        header: bool,
    ) -> dict[Request, Translation]:
        answers: dict[Request, Translation] = {}
        unknown = []
        for request in requests:
            cached = self._cache.get(request)
            if cached is None:
                unknown.append(request)
            else:
                self._cache.move_to_end(request)
                answers[request] = cached
        fresh = translate_all(
            clients.source_reader,
            clients.destination_reader,
            unknown,
            source_cluster_id,
            header=header,
        )
        for request, translation in fresh.items():
            # Only a translation is final; waiting and retention change with time.
            if isinstance(translation, Translated):
                self._cache[request] = translation
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        answers.update(fresh)
        return answers
