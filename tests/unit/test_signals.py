"""PreemptionHandler: a signal sets a flag, nothing else; previous handlers come back."""

import os
import signal
import threading
import time

import pytest

from dlscale.train.signals import PreemptionHandler


def wait_for(condition, timeout_s=2.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)  # Python runs signal handlers between bytecodes of the main thread
    return condition()


def test_sigusr1_sets_the_flag_and_does_not_exit():
    # Without a handler SIGUSR1 terminates the process: this test surviving is the check.
    with PreemptionHandler() as preemption:
        assert not preemption.requested and preemption.signal_name is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert wait_for(lambda: preemption.requested)
        assert preemption.signal_name == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGTERM)  # a later signal keeps the first name
        time.sleep(0.01)
        assert preemption.signal_name == "SIGUSR1"


def test_sigterm_sets_the_flag():
    with PreemptionHandler() as preemption:
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait_for(lambda: preemption.requested)
        assert preemption.signal_name == "SIGTERM"


def test_previous_handlers_are_restored_on_close():
    received = []

    def previous(signum, frame):
        received.append(signum)

    old_usr1 = signal.signal(signal.SIGUSR1, previous)
    old_term = signal.getsignal(signal.SIGTERM)
    try:
        preemption = PreemptionHandler()
        assert signal.getsignal(signal.SIGUSR1) != previous
        preemption.close()
        preemption.close()  # twice is harmless
        assert signal.getsignal(signal.SIGUSR1) is previous
        assert signal.getsignal(signal.SIGTERM) == old_term
        os.kill(os.getpid(), signal.SIGUSR1)
        assert wait_for(lambda: received == [signal.SIGUSR1])
        assert not preemption.requested  # closed: no longer listening
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)


def test_context_exit_restores_even_after_an_error():
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(KeyError), PreemptionHandler():
        raise KeyError("boom")
    assert signal.getsignal(signal.SIGUSR1) == before


def test_only_the_main_thread_can_install():
    errors = []

    def install():
        try:
            PreemptionHandler()
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=install)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])
