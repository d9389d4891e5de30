"""Remember the driver's Py4J name lookups (classes, packages, static methods) instead of asking the JVM each time.

Why: building the ingest query's plan — the parsers' and ECS mapping's column expressions — makes tens of
thousands of Py4J round trips, and every pipeline start pays them before its first micro-batch (the demo's first
alert, each restart of a query, each test that starts a pipeline). Measured on a cold driver at load 7-9
(building ``parse_records`` + ``attribute_stream`` once, round trips counted): 154,000 round trips and 28 s; with PySpark's
DataFrame call-site capture off (``spark.python.sql.dataFrameDebugging.enabled=false``, set in
``core.spark_session``) 71,000 and 18 s; about a third of what is left are *reflection* round trips that only
resolve a name — ``jvm.org.apache.spark.sql.functions`` one package level per trip, then the static method's name
— which every ``pyspark.sql.functions`` call repeats. With those answers remembered: 47,000 round trips, 16 s.

What is remembered: only answers that cannot change while the JVM lives — a package, a class, a static method
handle (a stateless proxy that names the class and the method). A static *field* is read every time (its value
may change), and a name that does not resolve is asked again (a later ``java_import`` may make it resolve).
Everything stays on the driver; executors never use Py4J.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView

_installed = False
_lock = threading.Lock()
_CACHEABLE = (JavaMember, JavaClass, JavaPackage)


def remember_jvm_lookups() -> None:
    """Install the lookup memory on Py4J's ``JVMView``, ``JavaPackage`` and ``JavaClass`` (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        _remember(JVMView, lambda view, name: (view._gateway_client, "view", view._id, name))
        _remember(JavaPackage, lambda pkg, name: (pkg._gateway_client, "package", pkg._fqn, name))
        _remember(JavaClass, lambda cls, name: (cls._gateway_client, "class", cls._fqn, name))
        _installed = True


def _remember(proxy_type: type, key: Callable[[Any, str], tuple]) -> None:
    lookup = proxy_type.__getattr__
    answers: dict[tuple, Any] = {}

    def __getattr__(self, name: str) -> Any:  # noqa: N807 - replaces the proxy's own __getattr__
        if name.startswith("_"):  # dunders, and attributes asked before __init__ set them (copy, pickle)
            return lookup(self, name)
        k = key(self, name)
        found = answers.get(k)
        if found is None:
            found = lookup(self, name)
            if isinstance(found, _CACHEABLE):
                answers[k] = found
        return found

    __getattr__.__doc__ = lookup.__doc__
    proxy_type.__getattr__ = __getattr__
