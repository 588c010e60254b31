"""Running the operator: kopf's handlers, leader election, and starting and stopping it."""
