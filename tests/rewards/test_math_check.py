"""math-verify gives the same answer in any thread and returns in bounded time."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skyrl_rewards import default_accuracy_reward
from skyrl_rewards.rewards.accuracy import default_accuracy_score
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.text import math_children
from skyrl_rewards.rewards.text.math_check import (
    check_equal,
    first_pass,
    low_priority,
    recent_check_cpu_s,
)
from skyrl_rewards.rewards.text.math_children import MathStatus, server_command
from skyrl_rewards.rewards.text.math_screen import MAX_MATH_CHARS, too_complex

SLOW = "$\\Gamma(10^{10})$"  # passes the pre-screen; SymPy computes (10^10 - 1)!

CASES = [
    ("<answer>$\\frac{1}{2}$</answer>", "<answer>0.5</answer>"),
    ("<answer>\\boxed{2\\sqrt{2}}</answer>", "<answer>$\\sqrt{8}$</answer>"),
    ("<answer>$x^2-1$</answer>", "<answer>$(x-1)(x+1)$</answer>"),
    ("<answer>12</answer>", "<answer>13</answer>"),
    ("<answer>The answer is B.</answer>", "<answer>B</answer>"),
    ("<answer>{1, 2}</answer>", "<answer>$\\{2, 1\\}$</answer>"),
]

PATHOLOGICAL = [
    "<answer>$9^{9^{9^{9}}}$</answer>",  # power tower: hangs inside SymPy
    "<answer>$" + "\\frac{1}{" * 10_000 + "2" + "}" * 10_000 + "$</answer>",  # 10,000 nested \frac
    "<answer>" + "1" * 5_000_000 + "</answer>",  # 5 MB answer
    "<answer>$(10^{100})!$</answer>",  # huge factorial
]

_SUBPROCESS_SCRIPT = """
import json, sys, time
from skyrl_rewards import default_accuracy_reward
cases = json.loads(sys.stdin.read())
out = []
for content, sol in cases:
    start = time.perf_counter()
    out.append([default_accuracy_reward(content, sol), time.perf_counter() - start])
print(json.dumps(out))
"""


def borderline(exponent: int) -> tuple[str, str]:
    """A correct answer whose check costs CPU growing with ``exponent`` (SymPy expands it)."""
    n = exponent
    return "$\\frac{1}{2}$", f"$1/2 + (x+1)^{{{n}}} (x-1)^{{{n}}} - (x^2-1)^{{{n}}}$"


def _main_thread(cases: list[tuple[str, str]]) -> list[float]:
    return [default_accuracy_reward(content, sol) for content, sol in cases]


def _in_threads(cases: list[tuple[str, str]]) -> list[float]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        return list(executor.map(lambda case: default_accuracy_reward(*case), cases))


def _in_subprocess(cases: list[tuple[str, str]]) -> list[tuple[float, float]]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_SCRIPT],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [tuple(pair) for pair in json.loads(done.stdout)]


def test_same_reward_main_thread_threads_and_subprocess() -> None:
    main = _main_thread(CASES)
    assert main[:3] == [1.0, 1.0, 1.0] and main[3] == 0.0 and main[4] == 1.0
    assert _in_threads(CASES) == main
    assert [value for value, _ in _in_subprocess(CASES)] == main


@pytest.mark.slow
@pytest.mark.parametrize("content", PATHOLOGICAL, ids=["tower", "nested_frac", "5MB", "factorial"])
def test_pathological_math_is_bounded_on_main_thread_and_in_threads(content: str) -> None:
    sol = "<answer>1</answer>"
    start = time.perf_counter()
    on_main = default_accuracy_reward(content, sol, math_timeout_s=2)
    assert 0.0 <= on_main < 0.2  # symbolic check gave up; only the fuzzy ratio remains
    with ThreadPoolExecutor(max_workers=1) as executor:
        assert (
            executor.submit(default_accuracy_reward, content, sol, math_timeout_s=2).result()
            == on_main
        )
    assert time.perf_counter() - start < 15


@pytest.mark.slow
def test_pathological_math_is_bounded_in_a_subprocess() -> None:
    results = _in_subprocess([(content, "<answer>1</answer>") for content in PATHOLOGICAL])
    assert all(0.0 <= value < 0.2 for value, _ in results), results
    assert all(seconds < 10 for _, seconds in results), results


def test_a_timed_out_pair_is_answered_at_once_the_second_time() -> None:
    gold, student = "$1$", SLOW  # not caught by the pre-screen; SymPy grinds
    assert check_equal(gold, student, timeout_s=1) is MathStatus.TIMEOUT
    start = time.perf_counter()
    assert check_equal(gold, student, timeout_s=1) is MathStatus.TIMEOUT
    assert check_equal(gold, student, timeout_s=0.5) is MathStatus.TIMEOUT  # a smaller limit too
    # Answered without a child: microseconds. Checking again would burn the limits' CPU time,
    # 1 + 0.5 s, so a bound of 1 s is far from both (a loaded machine stalls a caller for ms).
    assert time.perf_counter() - start < 1.0


def test_a_remembered_timeout_does_not_bind_a_larger_limit() -> None:
    gold, student = borderline(60)  # about 0.3 s of CPU
    assert check_equal(gold, student, timeout_s=0.05) is MathStatus.TIMEOUT
    assert check_equal(gold, student, timeout_s=30) is MathStatus.EQUAL


def test_a_timeout_is_reported_as_a_timeout() -> None:
    score = default_accuracy_score(f"<answer>{SLOW}</answer>", "<answer>3</answer>", timeout_s=1)
    assert score.status is Status.TIMEOUT and "timed out" in score.error


def test_a_child_killed_mid_check_is_replaced_and_reported() -> None:
    check_equal("$1$", "$1$")  # a child is running
    student = "$\\binom{10^{9}}{10^{8}}$"
    killer = threading.Timer(1.0, _kill_math_children)
    killer.start()
    outcome = check_equal("$3$", student, timeout_s=4)
    killer.join()
    assert outcome in (MathStatus.CRASHED, MathStatus.TIMEOUT)
    assert (
        check_equal("$\\frac{1}{2}$", "0.5") is MathStatus.EQUAL
    )  # a fresh child serves the next call


def _kill_math_children() -> None:
    subprocess.run(
        ["pkill", "-9", "-P", str(os.getpid()), "-f", "skyrl_rewards.rewards.text.math_child"],
        check=False,
    )


def test_inline_guard_gives_the_same_answers_in_threads() -> None:
    on_main = [default_accuracy_reward(c, s, math_guard="inline") for c, s in CASES]
    with ThreadPoolExecutor(max_workers=4) as executor:
        in_threads = list(
            executor.map(lambda case: default_accuracy_reward(*case, math_guard="inline"), CASES)
        )
    assert in_threads == on_main == _main_thread(CASES)


@pytest.mark.parametrize(
    "student",
    [
        "$9^{9^{9}}$",
        "$10^{1000000}$",
        "$5000!$",
        "$(10^{100})!$",
        "$(999!)!$",
        "$10^{99*99*99}$",  # exponent 970,299
        "$10^{99 \\cdot 99 \\cdot 99}$",  # the same, written as LaTeX products
        "$(10^{99999})^{99999}$",  # each exponent is small, the power has 10^10 digits
        "$(10 \\cdot 100)!$",  # 1000!
        "x" * (MAX_MATH_CHARS + 1),  # past the memory cap only
        "{" * 50,
    ],
)
def test_explosive_answers_are_refused_before_parsing(student: str) -> None:
    assert check_equal("$1$", student) is MathStatus.TOO_COMPLEX


@pytest.mark.parametrize(
    "student",
    [
        "$2^{2023}$",
        "$e^{-x^2}$",
        "$3!$",
        "$\\frac{1}{2}$",
        "$x^2+y^2$",
        "$10000\\left(1.025\\right)^{4 \\cdot 5}$",  # a product in an exponent: 20
        "$10^{99 \\cdot 99}$",  # 9,802 digits: SymPy builds it in microseconds
        "$(4 \\cdot 5)!$",
    ],
)
def test_ordinary_answers_are_not_refused(student: str) -> None:
    assert not too_complex(student)
    assert check_equal(student, student) is MathStatus.EQUAL


# Two worked solutions from math-verify's own test corpus (huggingface/Math-Verify,
# tests/test_all.py: "Issue #6" and "Decimal handling"), each with 10000(1.025)^{4 \cdot 5}
# on the way; math-verify judges both equal to the gold answer.
COMPOUND_INTEREST = [
    (
        "$16386.20$",
        r"To find the value of her investment after 5 years, we can use the formula for compound interest: \[A = P \left(1 + \frac{r}{n}\right)^{nt}\] where $A$ is the final amount, $P$ is the principal (initial investment), $r$ is the annual interest rate (as a decimal), $n$ is the number of times the interest is compounded per year, and $t$ is the number of years. In this case, Paula invested $\$10,\!000$, so $P = \$10,\!000$. The interest rate is $10\%$, which as a decimal is $r = 0.10$. The interest is compounded quarterly, so $n = 4$. The investment period is 5 years, so $t = 5$. Plugging these values into the formula, we get: \[A = 10000 \left(1 + \frac{0.10}{4}\right)^{4 \cdot 5}\] \[A = 10000 \left(1 + 0.025\right)^{20}\] \[A = 10000 \left(1.025\right)^{20}\] \[A \approx 10000 \cdot 1.63862\] \[A \approx 16386.20\] Rounded to the nearest cent, Paula's investment is worth $\boxed{\$16,\!386.20}$ at the end of the 5-year period. The answer is $16,\!386.20$. I apologize for the repetition in my previous responses. Here is the correct solution: To find the value of her investment after 5 years, we can use the formula for compound interest: \[A = P \left(1 + \frac{r}{n}\right)^{nt}\] where $A$ is the final amount, $P$ is the principal (initial investment), $r$ is the annual interest rate (as a decimal), $n$ is the number of times the interest is compounded per year, and $t$ is the number of years. In this",
    ),
    (
        "$16386.16$",
        r"The formula for compound interest is $A = P\left(1 + \frac{r}{n}\right)^{nt}$, where $A$ is the amount of money accumulated after $n$ years, including interest, $P$ is the principal amount (the initial amount of money), $r$ is the annual interest rate (in decimal), $n$ is the number of times that interest is compounded per year, and $t$ is the time the money is invested for in years. In this case, $P = 10000$, $r = 0.10$, $n = 4$ (since the interest is compounded quarterly), and $t = 5$. Plugging in these values, we get: \[ A = 10000\left(1 + \frac{0.10}{4}\right)^{4 \cdot 5} \] \[ A = 10000\left(1 + 0.025\right)^{20} \] \[ A = 10000\left(1.025\right)^{20} \] \[ A \approx 16386.16 \] So, Paula's investment is worth approximately $\boxed{16386.16}$ dollars at the end of the 5 years. Final Answer: The final answer is 16386.16.",
    ),
]


@pytest.mark.parametrize("gold, student", COMPOUND_INTEREST, ids=["16386.20", "16386.16"])
def test_worked_solutions_with_a_product_in_an_exponent_score_one(gold: str, student: str) -> None:
    assert not too_complex(student)
    content, sol = f"<answer>{student}</answer>", f"<answer>{gold}</answer>"
    assert default_accuracy_reward(content, sol, math_timeout_s=20) == 1.0


def test_inline_and_subprocess_guards_agree() -> None:
    for content, sol in CASES:
        inline = default_accuracy_reward(content, sol, math_guard="inline")
        assert inline == default_accuracy_reward(content, sol, math_guard="subprocess")


@pytest.mark.slow
def test_the_limit_is_cpu_time_not_wall_time_or_queueing() -> None:
    # 8 callers share MAX_CHILDREN children on a 2-core machine, next to two CPU burners: the last
    # callers wait several checks' worth of wall time, yet every check uses ~0.7 s of its 2 s of CPU.
    gold, student = borderline(100)
    alone = check_equal(gold, student, timeout_s=2)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with ThreadPoolExecutor(max_workers=8) as executor:
            crowded = list(
                executor.map(lambda _: check_equal(gold, student, timeout_s=2), range(8))
            )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert alone is MathStatus.EQUAL
    assert crowded == [alone] * 8


def test_a_math_verify_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    marker = tmp_path / "poisoned"
    (tmp_path / "math_verify.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit('poisoned')\n"
    )
    script = (
        "from skyrl_rewards.rewards.text.math_check import check_equal\n"
        "print(check_equal('$\\\\frac{1}{2}$', '0.5').value)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "equal"
    assert not marker.exists()


def test_the_child_keeps_pythonpath_entries_but_not_the_working_directory(
    tmp_path: Path,
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    script = (
        "import json, os, sys\n"
        "from skyrl_rewards.rewards.text.math_children import server_command\n"
        "print(json.dumps(server_command(7)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(extra)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    command = json.loads(done.stdout)
    assert command[1] == "-I"
    paths = json.loads(command[3])
    assert str(extra) in paths
    assert "" not in paths and str(tmp_path) not in paths
    assert command[4] == "7"
    assert server_command(7)[0] == sys.executable


def _long_answers() -> dict[str, tuple[str, str]]:
    """Realistic multi-KB correct answers (gold, student), each judged in well under a second."""
    rng = random.Random(0)
    reasoning = " ".join(
        f"Step {i}: substituting $a_{{{i}}} = {i}$ into the recurrence keeps the ratio fixed."
        for i in range(1, 60)
    )
    matrix = [[rng.randrange(1000) for _ in range(16)] for _ in range(16)]

    def pmatrix(cell: Callable[[int], str]) -> str:
        rows = (" & ".join(cell(value) for value in row) for row in matrix)
        return "$\\begin{pmatrix}" + " \\\\ ".join(rows) + "\\end{pmatrix}$"

    terms = [
        f"{rng.randrange(10**8, 10**9)} x^{{{i}}} y^{{{j}}}" for i in range(10) for j in range(10)
    ]
    shuffled = terms[:]
    rng.shuffle(shuffled)
    return {
        "worked_solution": ("$\\frac{3}{4}$", reasoning + " Hence the answer is $\\boxed{0.75}$."),
        "matrix": (pmatrix(str), pmatrix(lambda value: f"{value}.0")),
        "polynomial": ("$" + " + ".join(terms) + "$", "$" + " + ".join(shuffled) + "$"),
    }


@pytest.mark.parametrize("name", ["worked_solution", "matrix", "polynomial"])
def test_long_correct_answers_score_one(name: str) -> None:
    gold, student = _long_answers()[name]
    assert len(student) > 2_000 and not too_complex(student)
    content, sol = f"<answer>{student}</answer>", f"<answer>{gold}</answer>"
    assert default_accuracy_reward(content, sol, math_timeout_s=20) == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "}!" * 25_000,  # unmatched closers before factorials: 15 s at 20,000 characters before
        "}^1" * 16_000,  # the same before powers, whose base is now read
        "^{)" * 16_000,  # unclosed exponent groups
        "(1)^{2}" * 7_000,
        "9^{" + "1*" * 24_000 + "1}",
    ],
)
def test_the_pre_screen_is_linear_on_hostile_text(text: str) -> None:
    start = time.process_time()
    too_complex(text)
    assert time.process_time() - start < 2.0  # about 0.2 s at 50,000 characters


def test_length_alone_is_not_refused() -> None:
    assert not too_complex("x" * 3_000)
    assert not too_complex("1 + " * 5_000 + "1")


def test_first_pass_defers_a_slow_check_and_the_full_limit_then_judges_it() -> None:
    gold, student = borderline(70)  # about 0.4 s of CPU
    with first_pass(0.05) as state:
        assert check_equal(gold, student, timeout_s=30) is MathStatus.TIMEOUT
    assert state.deferred
    with first_pass(0.05) as again:  # remembered under the cap: deferred at once
        assert check_equal(gold, student, timeout_s=30) is MathStatus.TIMEOUT
    assert again.deferred
    assert check_equal(gold, student, timeout_s=30) is MathStatus.EQUAL
    with first_pass(0.05) as fast:
        assert check_equal("$\\frac{1}{2}$", "0.5") is MathStatus.EQUAL
    assert not fast.deferred


def test_recent_check_cpu_counts_the_checks_that_answered() -> None:
    gold, student = borderline(70)  # about 0.4 s of CPU
    assert check_equal(gold, student, timeout_s=30) is MathStatus.EQUAL
    assert recent_check_cpu_s(1.0) >= 0.2  # the slowest recent check
    assert 0.0 <= recent_check_cpu_s(0.5) <= recent_check_cpu_s(1.0)


def _process_table() -> dict[int, tuple[int, int, str]]:
    """``pid -> (parent pid, niceness, command line)`` of every process we can read."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[16]), command)
    return table


def _math_processes(root: int) -> tuple[list[int], dict[int, int]]:
    """The fork servers started by ``root``, and their children with each child's niceness."""
    table = _process_table()
    servers = [pid for pid, (ppid, _, cmd) in table.items() if ppid == root and "math_child" in cmd]
    children = {pid: nice for pid, (ppid, nice, _) in table.items() if ppid in servers}
    return servers, children


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux_only
def test_a_timeout_forks_a_new_child_from_the_same_server() -> None:
    assert check_equal("$2$", "2") is MathStatus.EQUAL
    servers, _ = _math_processes(os.getpid())
    assert len(servers) == 1
    assert check_equal("$3$", SLOW, timeout_s=0.5) is MathStatus.TIMEOUT
    assert check_equal("$\\frac{1}{4}$", "0.25") is MathStatus.EQUAL
    assert _math_processes(os.getpid())[0] == servers  # no new interpreter: a fork


@linux_only
def test_a_stopped_child_is_given_up_on_even_when_the_request_fills_its_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two 40,000-character answers make an 80 KB request, more than a pipe's 64 KB buffer; a
    # stopped child reads none of it, and before the fix the write blocked the caller for ever.
    monkeypatch.setattr(math_children, "STARVED_S", 1.0)
    assert check_equal("$2$", "2") is MathStatus.EQUAL
    children = list(_math_processes(os.getpid())[1])
    long_sum = "$" + "+".join(["1"] * 20_000) + "$"
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    executor = ThreadPoolExecutor(max_workers=1)
    try:
        stuck = executor.submit(check_equal, long_sum, long_sum, timeout_s=3)
        assert stuck.result(timeout=30) is MathStatus.TIMEOUT
        deadline = time.monotonic() + 30  # the kernel reaps a killed child within milliseconds
        while set(children) <= set(_math_processes(os.getpid())[1]):
            assert time.monotonic() < deadline, "the stopped child that was asked is still there"
            time.sleep(0.05)
    finally:
        for pid in children:  # idle ones that were never asked serve again
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        executor.shutdown()
    assert check_equal("$\\frac{1}{4}$", "0.25") is MathStatus.EQUAL


@linux_only
def test_low_priority_checks_run_in_nicer_children_with_the_same_outcome() -> None:
    gold, student = borderline(60)
    assert check_equal(gold, student, timeout_s=30) is MathStatus.EQUAL
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[int] = []
    with ThreadPoolExecutor(max_workers=1) as executor:

        def slow_check() -> MathStatus:
            with low_priority(7):
                return check_equal("$5$", SLOW, timeout_s=3)

        running = executor.submit(slow_check)
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            seen = [nice for nice in _math_processes(os.getpid())[1].values() if nice > base]
            time.sleep(0.05)
        assert running.result() is MathStatus.TIMEOUT
    assert seen == [min(19, base + 7)]
    with low_priority(7):
        assert check_equal(gold, student, timeout_s=30) is MathStatus.EQUAL
    with pytest.raises(ValueError, match="niceness"):
        with low_priority(20):
            pass


@linux_only
def test_a_killed_caller_leaves_no_check_running() -> None:
    script = (
        "import os, sys, threading, time\n"
        "from skyrl_rewards.rewards.text.math_check import check_equal\n"
        f"threading.Thread(target=check_equal, args=('$3$', {SLOW!r}), kwargs={{'timeout_s': 600}},"
        " daemon=True).start()\n"
        "time.sleep(600)\n"  # killed below; it must outlive a slow start of its math child
    )
    caller = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        children: dict[int, int] = {}
        while not children and time.monotonic() < deadline:
            children = _math_processes(caller.pid)[1]
            time.sleep(0.1)
        assert children, "the caller's check never started"
    finally:
        caller.kill()
        caller.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in children):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)


def _forked_check(pair: tuple[str, str]) -> tuple[str, int]:
    return check_equal(*pair).value, os.getpid()


@linux_only
def test_processes_forked_after_a_check_use_their_own_fork_server() -> None:
    import multiprocessing

    assert check_equal("$7$", "7") is MathStatus.EQUAL  # this process's server is running
    servers = _math_processes(os.getpid())[0]
    pairs = [("$\\frac{1}{2}$", "0.5"), ("$x^2+2x+1$", "$(x+1)^2$"), ("$3$", "4")] * 4
    with multiprocessing.get_context("fork").Pool(2) as workers:
        answers = workers.map(_forked_check, pairs)
    assert [value for value, _ in answers] == ["equal", "equal", "not_equal"] * 4
    assert check_equal("$\\frac{1}{3}$", "1/3") is MathStatus.EQUAL
    assert _math_processes(os.getpid())[0] == servers
