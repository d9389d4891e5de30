"""``sudo`` command log lines -> process events (dataset ``system.auth``).

``alice : TTY=pts/0 ; PWD=/home/alice ; USER=root ; COMMAND=/usr/bin/systemctl restart nginx`` is a command run
(outcome success); the same line with a reason before ``TTY=`` (``user NOT in sudoers``, ``3 incorrect password
attempts``, ``command not allowed``) is a refusal (outcome failure, the reason in ``system.auth.sudo.error``). Old
sudo versions pad the user name with leading spaces, lines without a terminal may lack ``TTY=``, and
``GROUP=``/``TSID=``/``ENV=`` may appear before ``COMMAND=``. ``user.name`` is who ran sudo, ``user.effective.name``
(and ``system.auth.sudo.user``) whom the command ran as. sudo's PAM lines are the ``pam`` source's.
"""

from __future__ import annotations

from collections.abc import Callable

from ingest.sources import Event, Source
from ingest.sources.message_forms import Form, Groups, body_parser, form

PROGRAMS = ("sudo",)
_DETAILS = (r"(?:TTY=(?P<tty>\S*) ; )?PWD=(?P<pwd>.*?) ; USER=(?P<target>\S+) ;(?: GROUP=(?P<group>\S+) ;)?"
            r"(?: TSID=\S+ ;)?(?: ENV=.*? ;)? COMMAND=(?P<command>.*)")


def _command(outcome: str) -> Callable[[Groups], Event]:
    def fields(g: Groups) -> Event:
        return {
            "event.category": ["process"], "event.type": ["start"], "event.action": "sudo_command",
            "event.outcome": outcome, "user.name": g["user"], "user.effective.name": g["target"],
            "group.name": g["group"],
            "detail": {"system.auth.sudo.error": g.get("error"), "system.auth.sudo.tty": g["tty"],
                       "system.auth.sudo.pwd": g["pwd"], "system.auth.sudo.user": g["target"],
                       "system.auth.sudo.group": g["group"], "system.auth.sudo.command": g["command"]},
        }

    return fields


FORMS: tuple[Form, ...] = (
    form("command", "", rf"\s*(?P<user>\S+) : {_DETAILS}", _command("success")),
    form("refused", "", rf"\s*(?P<user>\S+) : (?P<error>(?!TTY=|PWD=)[^;]*?) ; {_DETAILS}", _command("failure")),
)

SOURCE = Source(title="sudo: commands run and refused", transport="syslog", parse=body_parser(FORMS),
                programs=PROGRAMS, layer="program", order=100, program_dataset=("system", "system.auth"))
