"""HTCondor's job event log (the user log): which events a transition writes
(`events`), their text (`text`), and the leader's writer (`writer`).
"""
