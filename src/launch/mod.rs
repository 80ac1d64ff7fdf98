//! `torchtop run` and `torchtop attach`: putting the agent into Python programs.
