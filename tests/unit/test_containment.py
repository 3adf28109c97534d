"""Finding this process's cgroup v2 directory and reading /proc stat lines (the pure parts of containment)."""

from __future__ import annotations

from knarr.engine.containment import cgroup_dir, stat_fields

HYBRID_MOUNTS = """\
25 1 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory
"""
CONTAINER_MOUNTS = "612 600 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n"


def test_a_process_in_the_root_cgroup_gets_the_mount_point():
    assert cgroup_dir("1:cpu:/\n0::/\n", HYBRID_MOUNTS) == "/sys/fs/cgroup/unified"


def test_a_nested_cgroup_is_found_below_the_mount_point():
    assert cgroup_dir("0::/system.slice/knarr.service\n", HYBRID_MOUNTS) == "/sys/fs/cgroup/unified/system.slice/knarr.service"


def test_inside_a_cgroup_namespace_the_mount_root_is_the_containers_own_cgroup():
    assert cgroup_dir("0::/\n", CONTAINER_MOUNTS) == "/sys/fs/cgroup"


def test_without_a_v2_hierarchy_there_is_no_cgroup_dir():
    assert cgroup_dir("4:memory:/x\n1:cpu:/\n", HYBRID_MOUNTS) is None
    assert cgroup_dir("0::/\n", "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n") is None


def test_a_mount_of_another_subtree_does_not_count():
    mounts = "40 1 0:26 /other /mnt/cg rw - cgroup2 cgroup2 rw\n"
    assert cgroup_dir("0::/mine\n", mounts) is None


def test_stat_fields_survive_a_command_name_with_spaces_and_parentheses():
    line = "4242 (sleep (x) y) S 17 4242 4242 0 -1 4194560 90 0 0 0 0 0 0 0 20 0 1 0"
    assert stat_fields(line) == ("S", 17, 4242)
