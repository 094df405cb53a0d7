"""placeholder"""
def to_inference_data(*a, **k):
    raise NotImplementedError
