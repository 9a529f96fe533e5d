// fork_scale.test.mjs: the multi-worker scale test (scale.mjs) on the fork test driver.
import { testScale } from './scale.mjs';

testScale('fork');
