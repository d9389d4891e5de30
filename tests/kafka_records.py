"""Test-side Kafka helpers: produce known records to a real broker (no mocks)."""

from __future__ import annotations

from confluent_kafka import Producer


def produce(bootstrap: str, topic: str, n: int, partitions: int = 4, prefix: str = "rec",
            headers: bool = False) -> set[bytes]:
    """Send ``n`` records round-robin over ``partitions``; returns the set of values sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = set()
    errors = []
    for i in range(n):
        value = f"{prefix}-{topic}-{i}".encode()
        values.add(value)
        producer.produce(topic, value=value, key=str(i).encode(), partition=i % partitions,
                         headers=[("seq", str(i).encode())] if headers else None,
                         on_delivery=lambda err, _m: err and errors.append(err))
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    assert not errors, errors[:3]
    return values
