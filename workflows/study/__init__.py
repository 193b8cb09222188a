"""A human study served on the web: people play one role of a task against blinded agent arms.

`config` (the study config and its start-up checks), `store` (SQLite: invitations, turns,
outcomes; committed before every reply), `assignment` (invitations balanced per scenario),
`agents` (one party per arm, concurrent turns batched), `app` (the HTTP API and the page);
`experiments/human_study.py` serves one.
"""
