"""Rollouts: a model acting in a scenario's environment, turn by turn, with the simulated user
(the one episode runner, :mod:`.episode`, which synthesis runs too); the closed-loop
evaluation, the student's own samples for preference pairs, and their scores."""
