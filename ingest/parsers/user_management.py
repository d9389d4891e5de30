"""shadow-utils account management (``useradd``, ``groupadd``, ``usermod``, ``userdel``, ``groupdel``) -> ECS iam.

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

``user.name`` / ``group.name`` name the account acted on (as Elastic's system module does); the log line
does not say who ran the command.
"""

from __future__ import annotations

from ingest.parsers.field_map import literals
from ingest.parsers.regex_forms import FormFields, Groups, MessageForm, Pattern

PROGRAMS = ("useradd", "groupadd", "usermod", "userdel", "groupdel", "groupmod")


def _iam(types: list[str], action: str, outcome: str = "success") -> FormFields:
    return literals(event__category=["iam"], event__type=types, event__action=action, event__outcome=outcome)


def _new_user(g: Groups) -> FormFields:
    return {
        **_iam(["user", "creation"], "user_created"),
        "user.name": g("name"), "user.id": g("uid"), "group.id": g("gid"),
        "system.auth.useradd.home": g("home"), "system.auth.useradd.shell": g("shell"),
        "system.auth.useradd.from": g("from"),
    }


def _new_group(g: Groups) -> FormFields:
    return {**_iam(["group", "creation"], "group_created"), "group.name": g("name"), "group.id": g("gid")}


def _group_file(g: Groups) -> FormFields:
    return {**_new_group(g), "system.auth.groupadd.file": g("file")}


def _membership(g: Groups) -> FormFields:
    return {**_iam(["group", "change"], "user_added_to_group"), "user.name": g("user"), "group.name": g("group")}


def _delete_user(g: Groups) -> FormFields:
    return {**_iam(["user", "deletion"], "user_deleted"), "user.name": g("user")}


def _remove_group(g: Groups) -> FormFields:
    return {**_iam(["group", "deletion"], "group_deleted"), "group.name": g("group"), "user.name": g.get("user")}


def _change_user(g: Groups) -> FormFields:
    return {**_iam(["user", "change"], "user_changed"), "user.name": g("user")}


def _failed_user(g: Groups) -> FormFields:
    return {**_iam(["user", "creation"], "user_created", "failure"), "user.name": g("user")}


FORMS: tuple[MessageForm, ...] = (
    MessageForm(Pattern("useradd.new_user",
                        r"new user: name=(?<name>[^,]+), UID=(?<uid>[0-9]+), GID=(?<gid>[0-9]+), "
                        r"home=(?<home>[^,]*), shell=(?<shell>[^,]*?)(?:, from=(?<from>.*))?"), _new_user),
    MessageForm(Pattern("useradd.new_group", r"new group: name=(?<name>[^,]+), GID=(?<gid>[0-9]+)"), _new_group),
    MessageForm(Pattern("groupadd.group_file",
                        r"group added to (?<file>[^:\s]+): name=(?<name>[^,]+)(?:, GID=(?<gid>[0-9]+))?"),
                _group_file),
    MessageForm(Pattern("usermod.add_to_group",
                        r"add '(?<user>[^']+)' to (?:shadow )?group '(?<group>[^']+)'"), _membership),
    MessageForm(Pattern("userdel.delete_user", r"delete user '(?<user>[^']+)'"), _delete_user),
    MessageForm(Pattern("userdel.remove_group",
                        r"removed (?:shadow )?group '(?<group>[^']+)' owned by '(?<user>[^']+)'"), _remove_group),
    MessageForm(Pattern("groupdel.group_removed",
                        r"group '(?<group>[^']+)' removed(?: from \S+)?"), _remove_group),
    MessageForm(Pattern("usermod.change_user",
                        r"change user '(?<user>[^']+)' \S+ from '.*' to '.*'"), _change_user),
    MessageForm(Pattern("useradd.failed", r"failed adding user '(?<user>[^']+)'.*"), _failed_user),
)

