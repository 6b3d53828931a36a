"""Every sample a process serves carries the name of its flow, as the label ``flow``.

One Prometheus scrapes every flow of a site, and the alerts (deploy/prometheus/alerts.yml)
aggregate by flow: without the label, one flow that still writes hides another that stalled, and
an alert could not say which flow it is about. Added when the registry is served rather than
declared on each metric, so that no metric can be left without it (process metrics and the
broker-reach gauges included)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

FLOW_LABEL = "flow"


class FlowLabelledRegistry(CollectorRegistry):
    """``registry``'s metrics, each sample with ``flow`` added (a metric's own label of that name
    is kept)."""

    def __init__(self, registry: CollectorRegistry, flow: str) -> None:
        super().__init__(auto_describe=False)
        self._registry = registry
        self._flow = flow

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            labelled = copy.copy(family)  # the registry's own family stays unlabelled
            labelled.samples = [
                sample._replace(labels={FLOW_LABEL: self._flow, **sample.labels})
                for sample in family.samples
            ]
            yield labelled
