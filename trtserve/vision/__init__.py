"""Images in, without torch (docs/vision.md): decode and check a client's image (PNG, JPEG, WebP), turn it
into the tower's pixels as the checkpoint's image processor does, and expand the prompt's image
placeholders to the model's per-image token count. Serve runs it off the event loop; the engine only
sees the `ImageInput` values it makes (engine/vision.py)."""
