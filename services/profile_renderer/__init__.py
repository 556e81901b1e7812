"""The profile renderer: PROFILE.md managed blocks and the `prompt.context` sections."""
