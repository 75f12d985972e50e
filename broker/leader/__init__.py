"""The broker service: one leader among replicas (through a Redis lease), the
lease reaper, and the duties only the leader runs.
"""
