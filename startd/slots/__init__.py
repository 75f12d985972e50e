"""Slots: slot types and their resources, partitionable slots and the dynamic
slots carved from them, and the slot ads the startd publishes.
"""
