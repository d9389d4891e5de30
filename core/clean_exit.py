"""End the ``nightjar`` process without the interpreter teardown that aborts it after reading Delta tables.

The abort (``terminate called without an active exception``, exit status 134) comes from the way deltalake 1.6 hands
tables to pyarrow 26: ``DeltaTable.to_pyarrow_dataset()``/``to_pyarrow_table()`` read the parquet files through a
``pyarrow.fs.PyFileSystem`` wrapping deltalake's Python ``DeltaStorageHandler``. Arrow's own C++ I/O and CPU thread
pools therefore call back into Python (to read, and to release the handler's file objects). Those pool threads
outlive the scan; when the interpreter finalizes, a pool thread that then asks for the GIL is ended by CPython with
``pthread_exit``, the forced unwind runs into a ``noexcept`` C++ frame of Arrow's worker loop, and the C++ runtime
calls ``std::terminate`` (apache/arrow#39862, #45214; delta-io/delta-rs#2184). It is timing-dependent (measured here:
about one run in 20-40 of a script reading every table of a pipeline lake), which is why one table "always" worked.

Nothing is wrong with the data read: the process has finished its work and printed its output. The workaround is to
finish the process the way a C program does once its work is done: flush the output, run the ``atexit`` handlers
(Spark's, logging's), join the threads the command left running, and leave with ``os._exit`` so that interpreter
finalization, and with it the GIL hand-off that kills Arrow's threads, never happens. :func:`exit_process` is called
only by the ``nightjar`` program entry point (``nightjar.cli.main`` run as a program), never by code that a test
or another program calls in-process.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`nightjar tables | head`) or a closed stream
            pass


def exit_process(code: int) -> NoReturn:
    """Exit with ``code`` after everything the interpreter would do at exit, except its finalization."""
    # What a normal exit does first: wait for the non-daemon threads a command left running (threading._shutdown).
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()
    _flush()
    try:
        atexit._run_exitfuncs()  # Spark's SparkContext.stop, logging.shutdown, tempfile clean-ups, …
    finally:
        logging.shutdown()
        _flush()
        os._exit(code)


def run_as_program(main: Callable[[], int]) -> NoReturn:
    """Run ``main`` and exit the process with its status through :func:`exit_process`.

    ``SystemExit`` (argparse's usage errors, ``sys.exit`` inside a command) keeps its status; an unexpected exception
    still prints its traceback and exits 1, as Python would.
    """
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - report it as Python would, then exit without finalization
        import traceback

        traceback.print_exc()
        code = 1
    exit_process(int(code or 0))
