"""CI-length soak of the node kills that test_soak_ci.py does not cover (bridge, estimator,
reference, recorder), with a second recorder doubling the message load: every node of the
hardware graph SIGKILLed in turn across the two files. Real processes, DDS, UDP and pty."""

import pytest

from equimus_soak.checks import VENT_MARGIN_S
from equimus_soak.soak import KILLS, Soak

# Its checks judge the loop's timing against the scheduling delay of this machine: run alone
# (`make test` runs the serial tests after the others), not beside two other test processes.
pytestmark = pytest.mark.serial

EXPECTED = [
    'invariant: no code above the 50 kPa code on the wire',
    'invariant: non-zero output never outlives the board watchdog',
    "kill_bridge: controller's stale guard vents",
    'kill_bridge: restarted natnet_bridge resumes control',
    "kill_estimator: controller's stale guard vents",
    'kill_estimator: restarted estimator resumes control',
    'kill_reference: control runs on while reference is down',
    'kill_recorder: control runs on while recorder is down',
    'kill_recorder: the restarted recorder records into a new bag',
    'invariant: the bag holds every message the recorder acknowledged',
    'recorder: every /valve/command the probe saw is in the bag',
    'no node died on its own',
]


@pytest.fixture(scope='module')
def soak(tmp_path_factory):
    s = Soak(
        duration=36.0,  # the kills end ~31 s in on a quiet machine
        faults=KILLS,
        out=str(tmp_path_factory.mktemp('soak_kills')),
        gap=1.0,
        log=lambda *_: None,
        second_recorder=True,
        every_fault=True,  # a loaded machine lengthens the run, never drops a fault
    )
    figures, checks = s.run()
    return s, figures, {c.name: c for c in checks}


def test_every_kill_was_injected(soak):
    s, _, _ = soak
    assert [r.name for r in s.records] == list(KILLS), (s.out, [r.name for r in s.records])


@pytest.mark.parametrize('name', EXPECTED)
def test_expected_outcome(soak, name):
    s, _, checks = soak
    found = [c for n, c in checks.items() if n.startswith(name)]
    assert found, f'check {name!r} was not made; made: {sorted(checks)}'
    assert found[0].ok, f'{found[0].name}: {found[0].detail} (records in {s.out})'


def test_every_bag_reads_back_and_the_second_recorder_doubled_the_load(soak):
    s, figures, _ = soak
    assert figures['bags'] == 3  # the first bag, the one after the recorder kill, bag_load
    assert figures['recorder_read_back'] >= figures['recorder_acknowledged'] > 0
    assert figures['second_recorder_read_back'] >= figures['second_recorder_acknowledged'] > 0
    # the second recorder received as much as the first (killed for a while) did
    assert figures['second_recorder_read_back'] >= 0.9 * figures['recorder_read_back']
    assert figures['vent_margin_beyond_delay_max_ms'] <= VENT_MARGIN_S * 1e3, figures[
        'vent_margin_max_ms'
    ]
