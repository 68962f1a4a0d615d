"""What README.md and docs/ say about the NatNet versions is what the codec supports: every
version range or list they give equals protocol.SUPPORTED_VERSIONS, each of those versions
decodes a frame it encoded, and the versions just outside the range are refused."""

import re

import pytest

from equimus_hw.natnet import protocol as P

SUPPORTED = [P.version_text(v) for v in P.SUPPORTED_VERSIONS]
# "NatNet 3.0–4.3", "version support (3.0–4.3)", "one of 3.0–4.3"
RANGE = re.compile(r'(?:NatNet|version support \(|one of) (\d+\.\d+)[–-](\d+\.\d+)')
# "NatNet 3.0/3.1/4.0/…" and "NatNet 3.0 / 3.1 / …"
LIST = re.compile(r'NatNet (\d+\.\d+(?: ?/ ?\d+\.\d+)+)')


def _claims(repo_dir):
    files = [repo_dir / 'README.md', *sorted((repo_dir / 'docs').glob('*.md'))]
    files.append(repo_dir / 'src/equimus_hw/equimus_hw/natnet/protocol.py')
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in RANGE.finditer(line):
                yield f'{path.name}:{n}', [m.group(1), m.group(2)], line
            for m in LIST.finditer(line):
                yield f'{path.name}:{n}', re.split(r' ?/ ?', m.group(1)), line


def test_every_version_claim_matches_the_codec(repo_dir):
    claims = list(_claims(repo_dir))
    assert len(claims) >= 3, claims  # README (twice) and interfaces.md name them
    for where, versions, line in claims:
        expected = [SUPPORTED[0], SUPPORTED[-1]] if len(versions) == 2 else SUPPORTED
        assert versions == expected, f'{where}: {line.strip()}'


@pytest.mark.parametrize('version', P.SUPPORTED_VERSIONS)
def test_each_supported_version_round_trips_a_frame(version):
    frame = P.Frame(frame_number=7, rigid_bodies=[P.RigidBody(1, (0.1, 0.2, 0.3), (0, 0, 0, 1))])
    back = P.decode_frame(P.encode_frame(frame, version), version)
    assert back.frame_number == 7
    assert back.rigid_bodies[0].position == pytest.approx((0.1, 0.2, 0.3))


@pytest.mark.parametrize('version', [(2, 9), (3, 2), (4, 4), (5, 0)])
def test_versions_outside_the_range_are_refused(version):
    with pytest.raises(ValueError, match='not supported'):
        P.check_version(version)
