"""Approval rules (docs/approvals.md): the shell reader, rules and decisions, and the "always" proposal."""

from chock.rules.proposal import Proposal, propose
from chock.rules.rule import Decision, Rule, RuleSet, Verdict, check_pattern
from chock.rules.shell_syntax import Command, Parsed, SimpleCommand, simple_commands

__all__ = [
    "Command",
    "Decision",
    "Parsed",
    "Proposal",
    "Rule",
    "RuleSet",
    "SimpleCommand",
    "Verdict",
    "check_pattern",
    "propose",
    "simple_commands",
]
