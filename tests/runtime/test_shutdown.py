"""SIGTERM and SIGINT as the orchestrator sends them: to this very process."""

import logging
import os
import signal
import threading
import time

import pytest

from runtime import GracefulShutdown


def send(number: signal.Signals) -> None:
    os.kill(os.getpid(), number)
    time.sleep(0.01)  # Python runs the handler in the main thread between bytecodes: let it


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_signal_requests_a_stop(number):
    with GracefulShutdown() as shutdown:
        assert not shutdown.requested
        assert shutdown.reason is None
        send(number)  # SIGINT raises no KeyboardInterrupt
        assert shutdown.wait(5)
        assert shutdown.requested
        assert shutdown.reason == number.name


def test_previous_handlers_are_restored():
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    installed = []

    def crash():
        with GracefulShutdown():
            installed.append(signal.getsignal(signal.SIGTERM))
            raise RuntimeError("the role crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        crash()
    assert installed[0] not in (None, before[signal.SIGTERM])
    assert {number: signal.getsignal(number) for number in before} == before


def test_signal_wakes_a_waiting_main_thread():
    with GracefulShutdown() as shutdown:
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM))
        started = time.monotonic()
        timer.start()
        try:
            assert shutdown.wait(5)
        finally:
            timer.join()
        assert time.monotonic() - started < 1


def test_second_signal_while_draining_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="runtime.shutdown")
    with GracefulShutdown() as shutdown:
        send(signal.SIGTERM)
        send(signal.SIGINT)
        send(signal.SIGTERM)
        assert shutdown.reason == "SIGTERM"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "shutdown requested, draining"),
        ("WARNING", "drain in progress, signal ignored"),
    ]


def test_request_from_another_thread_wakes_wait_and_keeps_the_first_reason():
    shutdown = GracefulShutdown()
    timer = threading.Timer(0.05, shutdown.request, ("fatal: producer fenced",))
    started = time.monotonic()
    timer.start()
    try:
        assert shutdown.wait(5)
    finally:
        timer.join()
    assert time.monotonic() - started < 1
    shutdown.request("later")
    assert (shutdown.requested, shutdown.reason) == (True, "fatal: producer fenced")


def test_wait_times_out_without_a_request():
    shutdown = GracefulShutdown()
    started = time.monotonic()
    assert not shutdown.wait(0.15)
    assert 0.15 <= time.monotonic() - started < 1
    assert not shutdown.requested
