# Bad input: does not parse.
class ModelNew(nn.Module)
    pass
