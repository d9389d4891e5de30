"""``sudo`` command log lines -> ECS process events.

``alice : TTY=pts/0 ; PWD=/home/alice ; USER=root ; COMMAND=/usr/bin/systemctl restart nginx`` is a
command run (outcome success); the same line with a reason before ``TTY=`` (``user NOT in sudoers``,
``3 incorrect password attempts``, ``command not allowed``) is a refusal (outcome failure, the reason in
``system.auth.sudo.error``). Old sudo versions pad the user name with leading spaces, lines without a
terminal may lack ``TTY=``, and ``GROUP=``/``ENV=`` may appear before ``COMMAND=``. ``user.name`` is who
ran sudo, ``user.effective.name`` (and ``system.auth.sudo.user``) whom the command ran as. sudo's PAM
lines are handled by :mod:`.pam`.
"""

from __future__ import annotations

from ingest.parsers.field_map import literals
from ingest.parsers.regex_forms import FormFields, Groups, MessageForm, Pattern

PROGRAMS = ("sudo",)
_DETAILS = (r"(?:TTY=(?<tty>\S*) ; )?PWD=(?<pwd>.*?) ; USER=(?<target>\S+) ;(?: GROUP=(?<group>\S+) ;)?"
            r"(?: TSID=\S+ ;)?(?: ENV=.*? ;)? COMMAND=(?<command>.*)")


def _command(outcome: str):
    def fields(g: Groups) -> FormFields:
        return {
            **literals(event__category=["process"], event__type=["start"], event__action="sudo_command",
                       event__outcome=outcome),
            "user.name": g("user"),
            "user.effective.name": g("target"),
            "group.name": g("group"),
            "system.auth.sudo.error": g.get("error"),
            "system.auth.sudo.tty": g("tty"),
            "system.auth.sudo.pwd": g("pwd"),
            "system.auth.sudo.user": g("target"),
            "system.auth.sudo.group": g("group"),
            "system.auth.sudo.command": g("command"),
        }

    return fields


FORMS: tuple[MessageForm, ...] = (
    MessageForm(Pattern("sudo.command", rf"\s*(?<user>\S+) : {_DETAILS}"), _command("success")),
    MessageForm(Pattern("sudo.refused", rf"\s*(?<user>\S+) : (?<error>(?!TTY=|PWD=)[^;]*?) ; {_DETAILS}"),
                _command("failure")),
)
