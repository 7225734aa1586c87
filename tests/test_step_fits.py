"""A trace's step fits made in two processes (calibration.step_fits) and the verb's steady state
beside its window replay (fit.steady_beside) give what one process gives: the same fits in the
same order, the same model byte for byte, the same steady-state numbers; errors in the order
one process raises them."""
from __future__ import annotations

import os

import pytest

import stepsim.calibration.step_fits as step_fits
import stepsim.fit as fit
from stepsim.calibration.events import build_table
from stepsim.calibration.linking import link
from stepsim.calibration.rank_pool import JOBS_ENV, jobs_for
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_context import TraceContext
from stepsim.calibration.trace_io import load_trace
from stepsim.fit import calibrate_gpu, steady_beside
from stepsim.simcore.errors import InputError
from tests.conftest import shared_traces

RESNET = "param/resnet_kineto.json.gz"
_REAL_FIT = step_fits.fit_step


def _context(path):
    table = build_table(load_trace(path))
    ctx = TraceContext(table, link(table))
    steps = find_steps(table)
    ctx.steps = list(steps)
    return ctx, list(steps)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fits_in_two_processes_are_the_fits_in_one_in_order(monkeypatch, jobs):
    monkeypatch.setenv(JOBS_ENV, jobs)
    ctx, steps = _context(shared_traces() / RESNET)
    assert len(steps) >= 4
    one = [step_fits.fit_step(ctx, s) for s in steps[:4]]
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    two = step_fits.fit_steps(ctx, steps[:1], steps[1:4])
    assert [f.step.number for f in two] == [s.number for s in steps[:4]]
    assert two == one


def _pid(ctx, step):
    return os.getpid()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_last_half_is_fitted_in_another_process(monkeypatch, jobs):
    monkeypatch.setenv(JOBS_ENV, jobs)
    ctx, steps = _context(shared_traces() / RESNET)
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    monkeypatch.setattr(step_fits, "fit_step", _pid)
    pids = step_fits.fit_steps(ctx, steps[:2], steps[2:5])   # five fits: the last two there
    here = os.getpid()
    assert pids[:3] == [here] * 3
    assert (pids[3] != here and pids[4] == pids[3]) == (jobs_for(2) > 1)   # (one core: here)


def test_at_most_the_cap_is_fitted_there(monkeypatch):
    monkeypatch.setenv(JOBS_ENV, "2")
    ctx, steps = _context(shared_traces() / RESNET)
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    monkeypatch.setattr(step_fits, "MAX_FORKED_FITS", 1)
    monkeypatch.setattr(step_fits, "fit_step", _pid)
    pids = step_fits.fit_steps(ctx, steps[:1], steps[1:6])
    assert pids[:5] == [os.getpid()] * 5 and (pids[5] != os.getpid()) == (jobs_for(2) > 1)


def test_in_one_process_the_fits_are_made_in_order(monkeypatch):
    monkeypatch.setenv(JOBS_ENV, "1")
    ctx, steps = _context(shared_traces() / RESNET)
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    made = []
    monkeypatch.setattr(step_fits, "fit_step", lambda ctx, s: made.append(s.number))
    step_fits.fit_steps(ctx, steps[:1], steps[1:5])
    assert made == [s.number for s in steps[:5]]


def test_too_few_activities_are_fitted_here(monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    ctx, steps = _context(shared_traces() / RESNET)
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 10**9)
    monkeypatch.setattr(step_fits, "beside", lambda *a: pytest.fail("forked below the bound"))
    assert len(step_fits.fit_steps(ctx, steps[:1], steps[1:3])) == 3


def _refuse_step(ctx, step):
    raise InputError("t.json", f"step {step.number}")


def test_an_error_is_the_one_the_fits_in_order_raise_first(monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    ctx, steps = _context(shared_traces() / RESNET)
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    monkeypatch.setattr(step_fits, "fit_step", _refuse_step)
    with pytest.raises(InputError, match=f"step {steps[0].number}"):
        step_fits.fit_steps(ctx, steps[:1], steps[1:4])
    # only the forked process's last step fails: its error comes back and is raised here
    late = steps[3].number

    def refuse_late(ctx, step):
        if step.number == late:
            raise InputError("t.json", f"step {step.number}")
        return _REAL_FIT(ctx, step)

    monkeypatch.setattr(step_fits, "fit_step", refuse_late)
    with pytest.raises(InputError, match=f"step {late}"):
        step_fits.fit_steps(ctx, steps[:1], steps[1:4])


@pytest.mark.parametrize("trace", ["hta/trace_diff/test/test.json.gz", RESNET,
                                   "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0/"
                                   "worker0.pt.trace.json.gz"])
def test_every_model_is_the_same_with_the_fits_forked(monkeypatch, trace):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    path = shared_traces() / trace
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 10**9)
    one = calibrate_gpu(path).model_dump_json()
    monkeypatch.setattr(step_fits, "MIN_FORKED_ACTS", 0)
    assert calibrate_gpu(path).model_dump_json() == one


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_steady_state_beside_is_the_steady_state_here(monkeypatch, jobs):
    monkeypatch.setenv(JOBS_ENV, jobs)
    model = calibrate_gpu(shared_traces() / RESNET)
    monkeypatch.setattr(fit, "STEADY_BESIDE_WORK", 10**9)
    here = steady_beside(model, None, 20, lambda: "here")
    monkeypatch.setattr(fit, "STEADY_BESIDE_WORK", 0)
    assert steady_beside(model, None, 20, lambda: "here") == here
    assert here[1] == "here" and here[0][0] > 0 and here[0][1] > 0


def test_here_raises_first(monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    model = calibrate_gpu(shared_traces() / RESNET)
    monkeypatch.setattr(fit, "STEADY_BESIDE_WORK", 0)

    def here():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        steady_beside(model, None, 20, here)
