"""The deploy plan: input validation and its rule table, replicas, envelopes, speculation cost, model config."""
