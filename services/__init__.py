"""seglog's two servers: the gateway (routing, leader registry) and the storage node."""
