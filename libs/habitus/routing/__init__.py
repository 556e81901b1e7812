"""Routing as pure functions: the query's context and class, the routing policies, the trace
reward, model sizes and prices.

Two services need them: the trace router decides with them, and the optimizer replays them over
the recorded decisions to estimate what another configuration would have done. They read their
arguments only (no bus, no database), so both compute the same answer from the same facts.
"""
