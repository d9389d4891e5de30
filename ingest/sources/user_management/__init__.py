"""shadow-utils account management (``useradd``, ``groupadd``, ``usermod``, ``userdel``, ``groupdel``, ``groupmod``)
-> iam events (dataset ``system.auth``).

=================  =============================================================================  =====================
form               example                                                                        event.action
=================  =============================================================================  =====================
new_user           ``new user: name=bob, UID=1001, GID=1001, home=/home/bob, shell=/bin/bash,      user_created
                   from=/dev/pts/0`` (``from=`` only in newer versions)
new_group          ``new group: name=bob, GID=1001``                                               group_created
group_file         ``group added to /etc/group: name=dev, GID=1002`` / ``/etc/gshadow: name=dev``  group_created
add_to_group       ``add 'bob' to [shadow ]group 'sudo'``                                          user_added_to_group
delete_user        ``delete user 'bob'``                                                           user_deleted
remove_group       ``removed [shadow ]group 'bob' owned by 'bob'``, ``group 'dev' removed``         group_deleted
change_user        ``change user 'bob' shell from '/bin/sh' to '/bin/bash'``                      user_changed
failed_user        ``failed adding user 'bob', data deleted``                                     user_created (failure)
=================  =============================================================================  =====================

``user.name`` / ``group.name`` name the account acted on (as Elastic's system module does; the log line does not
say who ran the command); the ids the line gives are ``user.id`` and ``detail[group.id]``.
"""

from __future__ import annotations

from ingest.sources import Event, Source
from ingest.sources.message_forms import Form, Groups, body_parser, form

PROGRAMS = ("useradd", "groupadd", "usermod", "userdel", "groupdel", "groupmod")


def _iam(types: list[str], action: str, outcome: str = "success") -> Event:
    return {"event.category": ["iam"], "event.type": types, "event.action": action, "event.outcome": outcome}


def _new_user(g: Groups) -> Event:
    return {
        **_iam(["user", "creation"], "user_created"), "user.name": g["name"], "user.id": g["uid"],
        "detail": {"group.id": g["gid"], "system.auth.useradd.home": g["home"],
                   "system.auth.useradd.shell": g["shell"], "system.auth.useradd.from": g["from"]},
    }


def _new_group(g: Groups) -> Event:
    return {**_iam(["group", "creation"], "group_created"), "group.name": g["name"],
            "detail": {"group.id": g["gid"], "system.auth.groupadd.file": g.get("file")}}


def _membership(g: Groups) -> Event:
    return {**_iam(["group", "change"], "user_added_to_group"), "user.name": g["user"], "group.name": g["group"]}


def _delete_user(g: Groups) -> Event:
    return {**_iam(["user", "deletion"], "user_deleted"), "user.name": g["user"]}


def _remove_group(g: Groups) -> Event:
    return {**_iam(["group", "deletion"], "group_deleted"), "group.name": g["group"], "user.name": g.get("user")}


def _change_user(g: Groups) -> Event:
    return {**_iam(["user", "change"], "user_changed"), "user.name": g["user"]}


def _failed_user(g: Groups) -> Event:
    return {**_iam(["user", "creation"], "user_created", "failure"), "user.name": g["user"]}


FORMS: tuple[Form, ...] = (
    form("new_user", "new user: ",
         r"new user: name=(?P<name>[^,]+), UID=(?P<uid>[0-9]+), GID=(?P<gid>[0-9]+), "
         r"home=(?P<home>[^,]*), shell=(?P<shell>[^,]*?)(?:, from=(?P<from>.*))?", _new_user),
    form("new_group", "new group: ", r"new group: name=(?P<name>[^,]+), GID=(?P<gid>[0-9]+)", _new_group),
    form("group_file", "group added to ",
         r"group added to (?P<file>[^:\s]+): name=(?P<name>[^,]+)(?:, GID=(?P<gid>[0-9]+))?", _new_group),
    form("add_to_group", "add '", r"add '(?P<user>[^']+)' to (?:shadow )?group '(?P<group>[^']+)'", _membership),
    form("delete_user", "delete user '", r"delete user '(?P<user>[^']+)'", _delete_user),
    form("remove_group", "removed ",
         r"removed (?:shadow )?group '(?P<group>[^']+)' owned by '(?P<user>[^']+)'", _remove_group),
    form("group_removed", "group '", r"group '(?P<group>[^']+)' removed(?: from \S+)?", _remove_group),
    form("change_user", "change user '", r"change user '(?P<user>[^']+)' \S+ from '.*' to '.*'", _change_user),
    form("failed_user", "failed adding user '", r"failed adding user '(?P<user>[^']+)'.*", _failed_user),
)

SOURCE = Source(title="shadow-utils account management: users and groups created, changed, deleted",
                transport="syslog", parse=body_parser(FORMS), programs=PROGRAMS, layer="program", order=100,
                program_dataset=("system", "system.auth"))
