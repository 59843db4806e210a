"""Images: the runner images (``contagent build``) and the task images with the agent layered on."""
