"""Reading ``/metrics`` as Prometheus would: through the real view, parsed by prometheus_client's
own parser, into ``{(sample name, sorted labels): value}``."""

from __future__ import annotations

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(client: Client | None = None, **extra) -> Samples:
    """The metrics as a loopback client reads them (allowed by the default allow-list)."""
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    return parse(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when absent (a labelled counter appears once first counted)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
