"""docs/interfaces.md against the running nodes: every topic, service and parameter is documented.

Starts both graphs (the hardware one against the NatNet and DAC board emulators) through the same
description the launch files use, then asks the ROS graph what each node really offers.
"""

import re
import time

import pytest
import rclpy
from rcl_interfaces.srv import DescribeParameters, ListParameters

from equimus_bringup.graph import describe_graph
from equimus_bringup.supervisor import Supervisor
from equimus_hw.natnet.ports import free_udp_port_pair

INFRA_TOPICS = {'/rosout', '/parameter_events'}
INFRA_SERVICE_SUFFIXES = (
    '/describe_parameters',
    '/get_parameter_types',
    '/get_parameters',
    '/list_parameters',
    '/set_parameters',
    '/set_parameters_atomically',
    '/get_type_description',
)
INFRA_PARAMS = {'use_sim_time', 'start_type_description_service'}


def doc_sections(text):
    """Node name -> the text of its '## <name>' section."""
    sections = {}
    for block in re.split(r'^## ', text, flags=re.M)[1:]:
        title, _, body = block.partition('\n')
        m = re.match(r'`?([a-z_]+)`?', title.strip())
        if m:
            sections[m.group(1)] = body
    return sections


def documented_runtime(row):
    """Whether a parameter row says the value may be set while the node runs: a "set while
    running" cell that starts with yes, or the word runtime in its meaning."""
    cells = [c.strip() for c in row.strip().strip('|').split('|')]
    return any(c.startswith('yes') for c in cells) or 'runtime' in cells[-1]


def _documented_type(doc, topic, type_name):
    short = type_name.split('/')[-1]
    return any(f'`{topic}`' in line and short in line for line in doc.splitlines())


def _call(node, client, request, name, tries=5):
    """The service's answer, asked again when unanswered for 3 s: a service can take a request
    before its reply writer has matched this client's reader, and that reply is lost (a quiet
    CI run waited 10 s for one list_parameters answer)."""
    for _ in range(tries):
        fut = client.call_async(request)
        rclpy.spin_until_future_complete(node, fut, timeout_sec=3.0)
        if fut.done():
            return fut.result()
    raise AssertionError(f'{name} never answered {client.srv_name} ({tries} tries of 3 s)')


def introspect(node, names, timeout=20.0):
    """Topics (with types), services and parameter names of each node, once they have appeared."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.1)
        present = {n for n, ns in node.get_node_names_and_namespaces()}
        if set(names) <= present:
            break
    time.sleep(2.0)  # let late publishers/subscribers appear
    found = {}
    for name in names:
        pubs = node.get_publisher_names_and_types_by_node(name, '/')
        subs = node.get_subscriber_names_and_types_by_node(name, '/')
        srvs = node.get_service_names_and_types_by_node(name, '/')
        cli = node.create_client(ListParameters, f'/{name}/list_parameters')
        assert cli.wait_for_service(10.0), f'{name} offers no parameter services'
        names_ = list(_call(node, cli, ListParameters.Request(), name).result.names)
        dcli = node.create_client(DescribeParameters, f'/{name}/describe_parameters')
        assert dcli.wait_for_service(10.0), f'{name} offers no describe_parameters'
        described = _call(node, dcli, DescribeParameters.Request(names=names_), name)
        params = {d.name: not d.read_only for d in described.descriptors}
        found[name] = (pubs + subs, srvs, params)
    return found


@pytest.fixture
def ros(ros_node):
    return ros_node


@pytest.mark.parametrize(
    'mode,overrides',
    [
        ('sim', {'record': 'true'}),
        ('sim', {'record': 'true', 'composed': 'false'}),
        (
            'hardware',
            {'emulator': 'true', 'auto_arm': 'true', 'record': 'true', 'natnet_multicast': 'false'},
        ),
        (
            'hardware',
            {'emulator': 'true', 'auto_arm': 'true', 'record': 'true', 'fused_loop': 'true'},
        ),
    ],
)
def test_running_nodes_match_docs(ros, repo_dir, tmp_path, mode, overrides):
    overrides = dict(overrides, bag=str(tmp_path / 'bag'))
    if mode == 'hardware':
        port = free_udp_port_pair()
        overrides.update(
            serial_port=str(tmp_path / 'dac'),
            natnet_command_port=str(port),
            natnet_data_port=str(port + 1),
        )
    specs = describe_graph(mode, overrides)
    sup = Supervisor(specs, echo=False)
    sup.start()
    try:
        names = [n for s in specs if s.is_ros_node for n in (s.nodes or (s.name,))]
        found = introspect(ros, names)
        assert not sup.poll(), sup.failed
    finally:
        sup.stop()
    doc = (repo_dir / 'docs' / 'interfaces.md').read_text()
    sections = doc_sections(doc)
    problems = []
    for name, (topics, services, params) in found.items():
        section = sections.get(name)
        if section is None:
            problems.append(f'no "## {name}" section')
            continue
        for topic, types in topics:
            if topic in INFRA_TOPICS:
                continue
            if not _documented_type(doc, topic, types[0]):
                problems.append(
                    f'{name}: topic {topic} [{types[0]}] is not documented with its type'
                )
        for srv, types in services:
            if srv.endswith(INFRA_SERVICE_SUFFIXES):
                continue
            if f'`{srv}`' not in section and f'`~/{srv.rsplit("/", 1)[-1]}`' not in section:
                problems.append(f'{name}: service {srv} [{types[0]}] is not in its section')
        for p, settable in sorted(params.items()):
            if p in INFRA_PARAMS or p.startswith('qos_overrides.'):
                continue
            rows = [
                line for line in section.splitlines() if line.startswith('|') and f'`{p}`' in line
            ]
            if not rows:
                problems.append(f'{name}: parameter {p} is not in its section')
            elif documented_runtime(rows[0]) != settable:
                problems.append(
                    f'{name}: parameter {p} is {"settable" if settable else "read-only"} while '
                    f'running, its row says otherwise: {rows[0]}'
                )
    assert not problems, '\n'.join(problems)
