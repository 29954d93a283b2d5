"""A process with fewer inotify watches or instances than the machine allows, without touching the machine's.

Since Linux 5.11 the inotify limits are counted per user namespace (/proc/sys/user/max_inotify_*), and a
namespace's own root may lower them for it alone: a command run in a new user namespace (the caller's uid as
its root) with a lowered limit meets the kernel's own refusal — ENOSPC from inotify_add_watch, EMFILE from
inotify_init1 — while every other process keeps the machine's limits.

    daemons.start(prefix=inotify_limited(watches=3))
"""

from __future__ import annotations


def inotify_limited(*, watches: int | None = None, instances: int | None = None) -> list[str]:
    """The command prefix that runs a command in a user namespace of its own with these inotify limits."""
    limits = {"max_inotify_watches": watches, "max_inotify_instances": instances}
    steps = [f"echo {value} > /proc/sys/user/{name}" for name, value in limits.items() if value is not None]
    return ["unshare", "--user", "--map-root-user", "sh", "-ec", "; ".join([*steps, 'exec "$@"']), "sh"]
