"""bench/sched_idle.py: the replay of a kernel scheduler trace splits a CPU's idle time by what
was runnable meanwhile, exactly, on a hand-written two-CPU trace whose timeline is known."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sched_idle", REPO / "bench" / "sched_idle.py")
sched_idle = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sched_idle", sched_idle)   # its dataclasses look their module up
_spec.loader.exec_module(sched_idle)

HEADER = "# tracer: nop\n#\n# entries-in-buffer/entries-written: 12/12   #P:2\n#\n"


def _sw(cpu, t_ms, prev, prev_state, nxt):
    comm = lambda p: "swapper" if p == 0 else f"t{p}"    # noqa: E731
    return (f"  {comm(prev)}-{prev} [00{cpu}] d..2. {t_ms / 1e3:.6f}: sched_switch: "
            f"prev_comm={comm(prev)} prev_pid={prev} prev_prio=120 prev_state={prev_state} ==> "
            f"next_comm={comm(nxt)} next_pid={nxt} next_prio=120\n")


def _trace(tmp_path) -> Path:
    """Threads 10 and 11 share CPU 0, 12 runs on CPU 1 (times in ms):

    * 0: CPU 0 runs 10, CPU 1 runs 12; 1: 10 preempted by 11; 2: 11 preempted by 10, so 11
      waits on CPU 0's queue;
    * 4: 12 sleeps, CPU 1 idles beside 11 queued on CPU 0 (3 ms: queued elsewhere);
    * 7: 11 migrated to CPU 1 and run there (a pull); 8: 11 sleeps: nothing runnable (1 ms);
    * 9: 12 woken onto the idle CPU 1, running at 9.05 (0.05 ms: woken here); 10: the end.
    """
    lines = [HEADER, _sw(0, 0.0, 0, "R", 10), _sw(1, 0.0, 0, "R", 12),
             _sw(0, 1.0, 10, "R", 11), _sw(0, 2.0, 11, "R+", 10), _sw(1, 4.0, 12, "S", 0),
             "  <idle>-0 [001] d.s2. 0.007000: sched_migrate_task: comm=t11 pid=11 prio=120 "
             "orig_cpu=0 dest_cpu=1\n",
             _sw(1, 7.0, 0, "R", 11), _sw(1, 8.0, 11, "S", 0),
             "  t10-10 [000] d..3. 0.009000: sched_waking: comm=t12 pid=12 prio=120 "
             "target_cpu=001\n",
             _sw(1, 9.05, 0, "R", 12), _sw(0, 10.0, 10, "S", 0), _sw(1, 10.0, 12, "S", 0)]
    p = tmp_path / "trace.txt"
    p.write_text("".join(lines))
    return p


def test_the_idle_time_is_split_by_what_was_runnable(tmp_path):
    events, cpus = sched_idle.read_trace(_trace(tmp_path))
    assert cpus == 2 and len(events) == 12
    ran, split, idles = sched_idle.replay(events, cpus, 0.0, 10_000.0)
    assert split[sched_idle.QUEUED_ELSEWHERE] == pytest.approx(3_000.0)
    assert split[sched_idle.NOTHING] == pytest.approx(1_000.0)
    assert split[sched_idle.WOKEN_HERE] == pytest.approx(50.0)
    # every µs of both CPUs is a thread's run or an idle class: 2 × 10 ms
    assert sum(ran.values()) + sum(split.values()) == pytest.approx(20_000.0)
    assert ran[10] == pytest.approx(9_000.0) and ran[11] == pytest.approx(2_000.0)
    assert ran[12] == pytest.approx(4_000.0 + 950.0)
    first, second = idles
    assert (first.dur_us, first.began, first.queued, first.pulled) == \
        (pytest.approx(3_000.0), 12, True, True)
    assert (second.dur_us, second.began, second.queued, second.pulled) == \
        (pytest.approx(1_050.0), 11, False, False)


def test_a_window_counts_only_its_own_time(tmp_path):
    events, cpus = sched_idle.read_trace(_trace(tmp_path))
    ran, split, idles = sched_idle.replay(events, cpus, 5_000.0, 7_500.0)
    assert split[sched_idle.QUEUED_ELSEWHERE] == pytest.approx(2_000.0)
    assert sum(ran.values()) + sum(split.values()) == pytest.approx(5_000.0)
    assert idles == []     # the one idle interval inside began before the window


def test_owners_follow_the_creator_links(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(HEADER
                 + "  python-100 [000] d..2. 0.001000: sched_wakeup_new: comm=python pid=200 "
                   "prio=120 target_cpu=001\n"
                 + "  python-200 [001] d..2. 0.002000: sched_wakeup_new: comm=python pid=201 "
                   "prio=120 target_cpu=001\n"
                 + "  python-100 [000] d..2. 0.003000: sched_wakeup_new: comm=python pid=101 "
                   "prio=120 target_cpu=000\n")
    events, _ = sched_idle.read_trace(p)
    owner = sched_idle.owners(events, [200])
    assert [owner(t) for t in (100, 101, 200, 201, 999)] == \
        ["main", "main", "worker", "worker", "other"]
