"""Per-format parsers: each maps raw text onto ECS paths with Spark SQL functions only (no Python UDFs).

Shared machinery: :mod:`.field_map` (combining ``{ECS path: Column}`` mappings), :mod:`.regex_forms` (matching a
message against a list of regular expressions, extracting all groups in one pass), :mod:`.values` (IP, MAC,
number normalization). Formats: :mod:`.syslog_rfc3164`, :mod:`.syslog_rfc5424`, :mod:`.syslog` (header +
program dispatch), :mod:`.sshd`, :mod:`.sudo`, :mod:`.pam`, :mod:`.user_management`, :mod:`.dhcpd`,
:mod:`.syslog_json` (JSON payloads in syslog), :mod:`.windows` (Windows event logs over syslog), :mod:`.zeek`.
The public entry point is :mod:`ingest.normalize`.
"""
